"""A thought the slider moved is saved as it happened (issue 38, item 5): the reply's depth_path, and
the Markdown export reads "depth Max → Quick" with each stretch of the thought (pytest-qt, offscreen,
the demo)."""

import pytest

from app.state.chat_files import chat_markdown
from app.state.settings import Settings
from tests.app_support import finish, hold, make_window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=60))
    yield w
    w.close()


@pytest.mark.parametrize("moves, path", [(["Quick"], ["Max", "Quick"]), (["Max"], None),
                                         (["Quick", "Quick", "Balanced"], ["Max", "Quick", "Balanced"])])
def test_a_depth_move_mid_thought_is_saved_and_exported_as_it_happened(qtbot, window, gate, moves, path):
    c = window.controller
    _, controls = hold(qtbot, window, gate, "Max", 3)
    for name in moves:
        c.set_depth(name)
    meta = finish(qtbot, window, controls).meta
    saved = c.history.messages(c.chats.current)[-1].meta
    assert saved.get("depth_path") == path and meta.get("depth_path") == path
    text = chat_markdown(c.history, c.chats.current)
    assert (f"depth {' → '.join(path)} ·" if path else "depth Max ·") in text
    if path:
        assert "thought 2 tokens on 1.5M, then " in text  # held before its 3rd token on Max's thinker
