"""Saving the chat's system prompt as a preset: a chat with no prompt (empty or blank) has nothing to
save, and says so before a name is asked; a blank name is refused in one line; nothing is written then."""

import pytest

from app.state.presets import check_preset, load_presets
from app.state.settings import Settings
from tests.app_support import make_window


@pytest.mark.parametrize("prompt", ["", " ", "\n\t  \n", "\u3000"])
def test_a_blank_prompt_is_no_preset(prompt):
    assert "write one first" in check_preset("Mine", prompt)


@pytest.mark.parametrize("name", ["", "   ", "\t\n"])
def test_a_blank_name_is_no_preset(name):
    assert "needs a name" in check_preset(name, "Be kind.")


def test_an_empty_preset_saved_earlier_is_still_read(tmp_path):
    (tmp_path / "prompt_presets.json").write_text('{"Empty one": "", "Kind": "Be kind."}')
    assert load_presets(tmp_path) == ({"Empty one": "", "Kind": "Be kind."}, "")


def test_the_window_says_why_and_saves_nothing(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16))
    c, asked = w.controller, []

    def name(*_a, **_k):
        asked.append(True)
        return names.pop(0), True

    monkeypatch.setattr("PySide6.QtWidgets.QInputDialog.getText", name)
    for prompt in ("", "  \n "):  # no prompt: said before a name is asked, nothing saved
        c.chats.set_system_prompt(prompt)
        names = ["Empty one"]
        w.dialogs.save_preset()
        assert not asked and "write one first" in w.notes.error.text() and not w.notes.error.isHidden()
        assert load_presets(w.data_dir)[0] == {} and w.prompts.combo.currentData() != "Empty one"
    c.chats.set_system_prompt("Answer in French.")
    for blank in ("", "   "):  # a prompt with a blank name: one line, nothing saved
        names = [blank]
        w.dialogs.save_preset()
        assert "needs a name" in w.notes.error.text() and load_presets(w.data_dir)[0] == {}
    names = ["French"]
    w.dialogs.save_preset()
    assert load_presets(w.data_dir)[0] == {"French": "Answer in French."}
    w.close()
