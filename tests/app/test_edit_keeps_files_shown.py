"""Editing a sent message that had files: the box shows its text, and the chips show the files its new
version sends, marked "kept"; one removed there is not sent, one attached during the edit is. Before, the
chips went while the new version still kept the files (a real-window session). A draft's own files come
back after the edit, and a message without files shows none."""

import pytest
from PySide6.QtWidgets import QLabel, QToolButton

from app.state.attachments import Attachment
from app.state.settings import Settings
from app.widgets.attachment_row import AttachmentRow
from tests.app_support import make_window

NOTES = {"name": "notes.txt", "text": "the meeting moved to Tuesday", "kind": "text"}
TABLE = {"name": "table.csv", "text": "a,b\n1,2", "kind": "text"}


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=8))
    yield w
    w.close()


def sent(w, text: str, files: list[dict]) -> int:
    """A chat whose first message `text` was sent with `files`, and answered; the user message's id."""
    h = w.controller.history
    cid = h.new_conversation("With files").id
    mid = h.add_message(cid, "user", text, meta={"attachments": files} if files else None).id
    h.add_message(cid, "assistant", "Noted.")
    w.controller.chats.select(cid)
    return mid


def chips(w) -> list[str]:
    return [" ".join(label.text() for label in chip.findChildren(QLabel) if label.text()) for chip in w.files.items]


def removable(w) -> list[bool]:
    return [chip.findChild(QToolButton) is not None for chip in w.files.items]


@pytest.mark.parametrize("files", [[NOTES], [NOTES, TABLE]])
def test_the_files_a_new_version_keeps_are_shown_while_editing(qtbot, window, files):
    w = window
    mid = sent(w, "summarise it", files)
    assert chips(w) == []
    w.start_edit(mid)
    assert w.input.toPlainText() == "summarise it" and not w.files.isHidden()
    assert [c.split(" · ")[0] for c in chips(w)] == [f["name"] for f in files]
    assert all(c.endswith(" · kept") for c in chips(w)) and all(removable(w))
    w.cancel_edit()
    assert chips(w) == [] and w.files.isHidden()


def test_a_drafts_own_files_come_back_after_the_edit(qtbot, window):
    w, composer = window, window.controller.composer
    mid = sent(w, "summarise it", [NOTES])
    cid = w.controller.chats.current
    composer.attached[cid] = [Attachment("draft.md", "a draft's file", "text")]
    composer.show_attachments()
    assert [c.split(" · ")[0] for c in chips(w)] == ["draft.md"] and all(removable(w))
    w.start_edit(mid)
    assert [c.split(" · ")[0] for c in chips(w)] == ["notes.txt"]
    composer.detach(0)  # removed from the edit only
    assert chips(w) == []
    w.cancel_edit()
    assert [c.split(" · ")[0] for c in chips(w)] == ["draft.md"] and all(removable(w))


def test_a_message_without_files_shows_none_while_editing(qtbot, window):
    w = window
    mid = sent(w, "no files here", [])
    w.start_edit(mid)
    assert chips(w) == [] and w.files.isHidden()


def test_the_new_version_sends_what_the_chips_show(qtbot, window):
    w, c = window, window.controller
    mid = sent(w, "summarise it", [NOTES])
    w.start_edit(mid)
    shown = [chip.split(" · ")[0] for chip in chips(w)]
    w.input.setPlainText("summarise it in one line")
    with qtbot.waitSignal(c.sig_reply_done, timeout=180000):
        w.send()
    edited = next(m for m in c.history.messages(c.chats.current) if m.role == "user")
    assert edited.id != mid and [f["name"] for f in edited.meta["attachments"]] == shown
    assert chips(w) == []  # sent: nothing is attached to the next message


def test_a_kept_chip_says_what_the_new_version_does_with_it(qtbot):
    row = AttachmentRow()
    qtbot.addWidget(row)
    row.show_files([("notes.txt", 12, "", "", True), ("b.txt", 4, "")])
    kept, draft = row.items
    assert kept.findChild(QToolButton) is not None and draft.findChild(QToolButton) is not None
    assert "unless you remove it" in next(label.toolTip() for label in kept.findChildren(QLabel) if label.text())


@pytest.mark.parametrize("remove", [[0], [1], [0, 0]])
def test_the_new_version_sends_the_files_left_and_those_attached_during_the_edit(qtbot, window, tmp_path, remove):
    w, c = window, window.controller
    mid = sent(w, "summarise them", [NOTES, TABLE])
    w.start_edit(mid)
    left = [NOTES["name"], TABLE["name"]]
    for i in remove:
        c.composer.detach(i)
        left.pop(i)
    (tmp_path / "extra.md").write_text("one more file", encoding="utf-8")
    c.composer.attach(str(tmp_path / "extra.md"))
    qtbot.waitUntil(lambda: len(chips(w)) == len(left) + 1, timeout=30000)
    assert [chip.split(" · ")[0] for chip in chips(w)] == [*left, "extra.md"]
    assert not chips(w)[-1].endswith("kept")  # attached now, not sent before
    w.input.setPlainText("summarise what is left")
    with qtbot.waitSignal(c.sig_reply_done, timeout=180000):
        w.send()
    edited = [m for m in c.history.messages(c.chats.current) if m.role == "user"][-1]
    assert edited.id != mid and [f["name"] for f in edited.meta["attachments"]] == [*left, "extra.md"]


def test_an_edits_send_leaves_the_drafts_own_files_for_the_next_message(qtbot, window):
    w, c = window, window.controller
    mid = sent(w, "summarise it", [NOTES])
    cid = c.chats.current
    c.composer.attached[cid] = [Attachment("draft.md", "a draft's file", "text")]
    w.start_edit(mid)
    w.input.setPlainText("summarise it again")
    with qtbot.waitSignal(c.sig_reply_done, timeout=180000):
        w.send()
    assert [f["name"] for f in c.composer.files_to_send(cid)] == ["draft.md"]
    assert [chip.split(" · ")[0] for chip in chips(w)] == ["draft.md"]
