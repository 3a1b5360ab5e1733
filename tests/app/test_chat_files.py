"""Chats as files: Markdown to read, JSON to move between machines (every version, the reply details);
an imported file is checked whole first, so a bad one imports nothing and changes nothing."""

import json
import os

import pytest

from app.state import chat_files
from app.state.chat_files import ChatFileError, chat_json, chat_markdown, import_chat
from app.state.history import History

META = {"depth": "Deep", "think_submodel": "0.5M", "answer_submodel": "1.5M", "thinking_tokens": 40,
        "answer_tokens": 12, "tokens_per_s": 8.25, "elapsed_ms": 2300.0, "finish_reason": "end_of_turn",
        "switches": [{"from": "0.5M", "to": "1.5M", "reprefill_tokens": 30, "ms": 4.5, "reason": "answer"}]}


@pytest.fixture
def history(tmp_path):
    h = History(tmp_path / "a.sqlite3")
    yield h
    h.close()


def _chat(h: History) -> int:
    cid = h.new_conversation("Sums", system_prompt="Be brief.", settings={"sampling": {"temperature": 0.2}}).id
    q = h.add_message(cid, "user", "What is 2 + 3?")
    h.add_message(cid, "assistant", "5", thinking="2 + 3 = 5", meta=META)
    h.set_leaf(cid, q.id)
    h.add_message(cid, "assistant", "Five.", meta={**META, "depth": "Quick"})  # a regenerated version
    return cid


def test_json_round_trip_keeps_every_version_and_the_reply_details(history, tmp_path):
    cid = _chat(history)
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(chat_json(history, cid)))
    other = History(tmp_path / "b.sqlite3")
    try:
        new, note = import_chat(other, path)
        assert "Imported “Sums” (3 messages)" in note
        conv = other.conversation(new)
        assert conv.system_prompt == "Be brief." and conv.settings == {"sampling": {"temperature": 0.2}}

        def shape(h, c):
            return [(m.role, m.content, m.thinking, m.meta, len(m.versions)) for m in h.all_messages(c)]
        assert shape(other, new) == shape(history, cid)
        assert [m.content for m in other.messages(new)] == ["What is 2 + 3?", "Five."]  # the branch shown
    finally:
        other.close()


def test_markdown_reads_as_the_branch_shown_with_the_details(history):
    text = chat_markdown(history, _chat(history))
    assert text.startswith("# Sums") and "> Be brief." in text and "## You" in text
    assert "## Assistant (depth Quick · thought on 0.5M · answered by 1.5M · 40 + 12 tokens" in text
    assert "Five." in text and "\n5\n" not in text  # the other version is not in the reading copy


def _valid(h, cid):
    return chat_json(h, cid)


BAD = {
    "not a chat file": lambda d: {"title": "x"},
    "a newer version": lambda d: {**d, "version": 2},
    "a version that is text": lambda d: {**d, "version": "1"},
    "no messages": lambda d: {**d, "messages": []},
    "a message that is a list": lambda d: {**d, "messages": [[1, 2]]},
    "a repeated id": lambda d: {**d, "messages": [d["messages"][0], d["messages"][0]]},
    "a parent after its child": lambda d: {**d, "messages": d["messages"][::-1]},
    "a parent that is not there": lambda d: {**d, "messages": [{**d["messages"][0], "parent": 999}]},
    "a role of system": lambda d: {**d, "messages": [{**d["messages"][0], "role": "system"}]},
    "text that is a number": lambda d: {**d, "messages": [{**d["messages"][0], "content": 5}]},
    "complete that is text": lambda d: {**d, "messages": [{**d["messages"][0], "complete": "yes"}]},
    "details that are a list": lambda d: {**d, "messages": [{**d["messages"][0], "meta": []}]},
    "a shown message not in it": lambda d: {**d, "shown": 999},
    "settings that are text": lambda d: {**d, "settings": "hot"},
    "a title that is an object": lambda d: {**d, "title": {}},
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_file_imports_nothing_and_says_why_in_one_line(history, tmp_path, case):
    cid = _chat(history)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(BAD[case](_valid(history, cid))))
    before = [(c.id, c.title) for c in history.conversations()]
    with pytest.raises(ChatFileError) as e:
        import_chat(history, path)
    assert "bad.json could not be imported" in str(e.value) and "\n" not in str(e.value)
    assert [(c.id, c.title) for c in history.conversations()] == before


def _first(d: dict, **changed) -> list:
    return [{**d["messages"][0], **changed}, *d["messages"][1:]]


HALVES = {  # where a lone surrogate sits (valid JSON: "\\ud800")
    "the title": lambda d, c: {**d, "title": f"Sums {c}"},
    "the system prompt": lambda d, c: {**d, "system_prompt": c},
    "a message's text": lambda d, c: {**d, "messages": _first(d, content=f"2 + 3{c}")},
    "a message's thinking": lambda d, c: {**d, "messages": _first(d, thinking=c * 3)},
    "a setting's value": lambda d, c: {**d, "settings": {"sampling": {"temperature": 0.2}, "name": c}},
    "a reply detail": lambda d, c: {**d, "messages": _first(d, meta={**META, "depth": c})},
    "a reply detail's key": lambda d, c: {**d, "messages": _first(d, meta={**META, c: 1})},
    "a key of the file": lambda d, c: {**d, f"x{c}": 1},
}


@pytest.mark.parametrize("half", ["\ud800", "\udbff", "\udc00", "\udfff", "\udc80"])
@pytest.mark.parametrize("where", list(HALVES))
def test_a_lone_surrogate_is_a_one_line_refusal(history, tmp_path, where, half):
    cid = _chat(history)
    path = tmp_path / "half.json"
    path.write_text(json.dumps(HALVES[where](_valid(history, cid), half)))  # ASCII: the escape, as JSON allows
    before = [(c.id, c.title) for c in history.conversations()]
    with pytest.raises(ChatFileError) as e:
        import_chat(history, path)
    message = str(e.value)
    assert "half.json could not be imported" in message and "\n" not in message
    assert f"lone surrogate \\u{ord(half):04x}" in message and message.isprintable()
    assert [(c.id, c.title) for c in history.conversations()] == before


def test_a_whole_character_beyond_the_basic_plane_is_imported(history, tmp_path):
    """A surrogate pair in JSON ("\\ud83d\\ude00") is one character, not two halves."""
    cid = _chat(history)
    path = tmp_path / "emoji.json"
    data = _valid(history, cid)
    path.write_text(json.dumps({**data, "title": "Sums \U0001F600", "messages": _first(data, content="\U0001F600")}))
    new, _ = import_chat(history, path)
    assert history.conversation(new).title == "Sums \U0001F600"


def test_files_that_are_not_json_or_too_big_or_not_files(history, tmp_path, monkeypatch):
    for name, content in (("garbage.json", b"\x00\xff{"), ("list.json", b"[1, 2]")):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ChatFileError, match=f"{name} could not be imported"):
            import_chat(history, tmp_path / name)
    monkeypatch.setattr(chat_files, "MAX_FILE_BYTES", 100)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_valid(history, _chat(history))))
    with pytest.raises(ChatFileError, match="big.json could not be imported"):
        import_chat(history, path)
    with pytest.raises(ChatFileError, match="could not be imported"):
        import_chat(history, tmp_path)  # a folder
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(ChatFileError, match="pipe.json could not be imported"):  # never waits on a pipe
        import_chat(history, fifo)
    with pytest.raises(ChatFileError, match="no such file"):
        import_chat(history, tmp_path / "missing.json")


def test_unreadable_reply_details_are_left_out_and_said(history, tmp_path):
    data = _valid(history, _chat(history))
    data["messages"][1]["meta"] = {**META, "tokens_per_s": "fast"}
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(data))
    cid, note = import_chat(history, path)
    assert "Details of 1 reply could not be read" in note
    assert "tokens_per_s" not in history.all_messages(cid)[1].meta and history.all_messages(cid)[1].meta["depth"]


def test_the_window_exports_and_imports_through_its_menu(qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    from app.state.settings import Settings
    from tests.app_support import ask, make_window

    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=24))
    ask(qtbot, w, "hello", "Off")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out / "hello"), a[3].split(";;")[1]))
    w.dialogs.export_chat()
    assert json.loads((out / "hello.json").read_text())["messages"][1]["meta"]["answer_submodel"]
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(out / "hello.json"), ""))
    before = w.controller.chats.current
    w.dialogs.import_chat()
    assert w.controller.chats.current != before and len(w.chat.widgets) == 2 and "Imported" in w.notes.error.text()
    w.close()


MOVED = {**META, "depth": "Max", "depth_path": ["Max", "Quick"], "think_submodel": "1.5M", "thinking_tokens": 72,
         "thinking_budget": 8, "budget_hit": True, "thinking_by_submodel": {"1.5M": 23, "0.5M": 49},
         "thinking_path": [["1.5M", 23], ["0.5M", 49]]}


@pytest.mark.parametrize("meta, says, never", [
    (MOVED, "depth Max → Quick · thought 23 tokens on 1.5M, then 49 on 0.5M · budget hit", "thought on 1.5M"),
    ({**MOVED, "depth_path": ["Max", "Quick", "Deep"], "thinking_path": [["1.5M", 23], ["0.5M", 40], ["1.0M", 9]],
      "budget_hit": False}, "depth Max → Quick → Deep · thought 23 tokens on 1.5M, then 40 on 0.5M, then 9 on 1.0M ·",
     "budget hit"),
    # moved to a depth with the same thinker: the depth moved, the thought stayed on one submodel
    ({**MOVED, "depth_path": ["Deep", "Max"], "thinking_path": [["1.5M", 72]], "thinking_by_submodel": {"1.5M": 72},
      "think_submodel": "1.0M"}, "depth Deep → Max · thought on 1.5M · budget hit", "on 1.0M"),
])
def test_the_export_says_what_happened_to_a_thought_the_slider_moved(history, tmp_path, meta, says, never):
    cid = history.new_conversation("Moved").id
    history.add_message(cid, "user", "What is 45 + 23 - 17 + 9?")
    history.add_message(cid, "assistant", "60", thinking="…", meta=meta)
    text = chat_markdown(history, cid)
    assert says in text and never not in text
    saved = chat_json(history, cid)["messages"][-1]["meta"]  # the JSON keeps the moves beside the budget
    assert saved["depth_path"] == meta["depth_path"] and saved["thinking_path"] == meta["thinking_path"]


@pytest.mark.parametrize("titles,expected", [
    ((), "Sums"),  # a title no chat has is kept
    (("Sums",), "Sums (imported)"),  # the original is beside it: the list tells them apart
    (("Sums", "Sums (imported)"), "Sums (imported 2)"),
    (("Sums", "Sums (imported)", "Sums (imported 2)"), "Sums (imported 3)"),
    (("sums", "Sums (imported)"), "Sums"),  # other titles, however alike, leave it as it is
])
def test_an_imported_chat_is_told_apart_from_a_chat_of_the_same_title(tmp_path, titles, expected):
    h = History(tmp_path / "h.sqlite3")
    try:
        source = _chat(h)
        path = tmp_path / "chat.json"
        path.write_text(json.dumps(chat_json(h, source)))
        h.delete(source)  # the chats present are `titles`
        for title in titles:
            h.new_conversation(title)
        new, note = import_chat(h, path)
        assert h.conversation(new).title == expected and f"Imported “{expected}”" in note
    finally:
        h.close()


def test_a_long_title_keeps_its_mark_within_the_title_limit(history, tmp_path):
    cid = _chat(history)
    history.rename(cid, "x" * chat_files.MAX_TITLE)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(chat_json(history, cid)))
    new, _ = import_chat(history, path)
    title = history.conversation(new).title
    assert title.endswith("x (imported)") and len(title) == chat_files.MAX_TITLE


NOT_CHATS = {  # files a user may pick in Import chat… that are no chat in JSON
    "a Markdown export": lambda h, cid: chat_markdown(h, cid).encode(),
    "a picture": lambda h, cid: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "a JSON list": lambda h, cid: b"[1, 2]",
    "plain text": lambda h, cid: b"2 + 3 = 5\n",
}


@pytest.mark.parametrize("case", list(NOT_CHATS))
def test_a_file_that_is_no_chat_in_json_says_what_imports(history, tmp_path, case):
    """A Markdown export imported back said only "it is not valid JSON (line 1: Expecting value)": the
    line now says what to do next (found in a real-window session)."""
    cid = _chat(history)
    path = tmp_path / "chat.md"
    path.write_bytes(NOT_CHATS[case](history, cid))
    with pytest.raises(ChatFileError) as e:
        import_chat(history, path)
    message = str(e.value)
    assert message.startswith("chat.md could not be imported: ") and "\n" not in message
    assert message.endswith("Import takes a chat exported as JSON (Chat → Export chat…, file type JSON).")


def test_a_file_that_cannot_be_reached_does_not_say_to_export_again(history, tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo, tmp_path / "missing.json"):  # a folder, a pipe, no file: not about the format
        with pytest.raises(ChatFileError) as e:
            import_chat(history, path)
        assert "exported as JSON" not in str(e.value)
