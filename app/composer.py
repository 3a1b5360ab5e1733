"""The message being written, per chat: the draft in the box (not saved), the sent message being edited,
and the files attached to it (read in a worker thread, counted by the context meter's counter).
"""

from __future__ import annotations

import functools
import itertools

from PySide6.QtCore import QObject, Slot


class Composer(QObject):
    def __init__(self, front):
        super().__init__(front)
        from .workers import TaskRunner

        self.front = front  # app/controller.py ChatController
        self.drafts: dict[int, str] = {}  # chat id -> the message being written there (not saved)
        self.editing: int | None = None  # the sent message being edited
        self.editing_text = ""  # the edited message as the box holds it now (for the meter)
        self.attached: dict[int, list] = {}  # chat id -> the Attachments of the message being written there
        self.editing_files: list = []  # the Attachments the edited message's new version sends (shown as chips)
        self.kept_names: set[str] = set()  # of those, the sent message's (marked "kept")
        self.attachment_tokens: dict[int, tuple[int, str]] = {}  # an attachment's key -> (its tokens alone, how)
        self._attachment_keys = itertools.count(1)  # (a key crosses to the counter as a C int: not id())
        self.attachment_key: dict[int, int] = {}  # id(Attachment) -> its key
        self.refused = ""  # the last file's refusal, withdrawn when a file is attached after it
        self.tasks = TaskRunner(self)  # reads attached files (a PDF can take a while)
        front.context.counter.sig_text_counted.connect(self._on_text_counted)

    # ------------------------------------------------------------------ the draft and the edit

    def set_draft(self, text: str) -> None:
        """The message box's text in the chat shown (kept per chat); the meter counts it after a pause."""
        current = self.front.chats.current
        if self.editing is not None:
            self.editing_text = text
        elif current is not None:
            if text:
                self.drafts[current] = text
            else:
                self.drafts.pop(current, None)
        self.front.context.count_later()

    def draft(self, cid: int | None) -> str:
        return self.drafts.get(cid, "") if cid is not None else ""

    def begin_edit(self, message_id: int) -> str | None:
        """Starts editing sent message `message_id` of the chat shown; its text, or None when there is none."""
        front = self.front
        msg = next((m for m in front.history.messages(front.chats.current)
                    if m.id == message_id and m.role == "user"), None)
        if msg is None:
            return None
        self.editing, self.editing_text = message_id, msg.content
        self.editing_files = attachments_of(msg)
        self.kept_names = {a.name for a in self.editing_files}
        for a in self.editing_files:
            self._count_attachment(a)
        front.sig_editing.emit(msg.content)
        self.show_attachments()
        return msg.content

    def cancel_edit(self) -> None:
        if self.editing is not None:
            self.editing = None
            for a in self.editing_files:
                self.attachment_tokens.pop(self.attachment_key.pop(id(a), 0), None)
            self.editing_files = []
            self.front.sig_editing.emit("")
            self.show_attachments()

    def next_message(self, cid: int) -> tuple[str, list[dict]]:
        """What the box holds for chat `cid` now: (text, files); while editing, the new version's."""
        if self.editing is not None:
            return self.editing_text, self.files_to_send(cid)
        return self.draft(cid), self.files_to_send(cid)

    # ------------------------------------------------------------------ attachments

    def files_to_send(self, cid: int) -> list[dict]:
        """The files attached in chat `cid`, as a message's meta keeps them; while editing, those the new
        version sends (the edited message's, less those removed, plus those attached during the edit)."""
        return [a.to_dict() for a in (self.editing_files if self.editing is not None else self.attached.get(cid, []))]

    def sent(self, cid: int) -> None:
        """The message of chat `cid` was sent: its files are no longer attached to the next one."""
        sent = self.attached.pop(cid, [])
        for a in sent:
            self.attachment_tokens.pop(self.attachment_key.pop(id(a), 0), None)
        if sent:
            self.show_attachments()

    def take_back(self, cid: int, message) -> None:
        """A message taken back from chat `cid`: its text in the box, its files attached again."""
        files = attachments_of(message)
        if files:
            self.attached[cid] = files
            for a in files:
                self._count_attachment(a)
        self.drafts[cid] = message.content

    def attach(self, path: str) -> None:
        """Reads the file at `path` in a worker thread and attaches it to the message being written in the
        chat shown (a refusal is the error line)."""
        from .state.attachments import read_attachment

        cid = self.front.chats.current
        if cid is None:
            return
        self.tasks.run(read_attachment, (path,), functools.partial(self._attached, cid), self._not_attached)

    def _attached(self, cid: int, attachment) -> None:
        if self.refused:
            self.front.sig_error_withdrawn.emit(self.refused)
            self.refused = ""
        editing = self.editing is not None and cid == self.front.chats.current
        (self.editing_files if editing else self.attached.setdefault(cid, [])).append(attachment)
        self._count_attachment(attachment)
        if attachment.note:
            self.front.sig_notice.emit(f"{attachment.name} is attached: {attachment.note}.")
        if cid == self.front.chats.current:
            self.show_attachments()
            self.front.context.count()

    def _count_attachment(self, attachment) -> None:
        key = self.attachment_key[id(attachment)] = next(self._attachment_keys)
        self.front.context.count_text(key, attachment.text)

    def _not_attached(self, message: str) -> None:
        self.refused = message
        self.front.sig_error.emit(message, "")

    def detach(self, index: int) -> None:
        files = self.editing_files if self.editing is not None else self.attached.get(self.front.chats.current, [])
        if 0 <= index < len(files):
            self.attachment_tokens.pop(self.attachment_key.pop(id(files.pop(index)), 0), None)
            self.show_attachments()
            self.front.context.count()

    @Slot(int, int, str)
    def _on_text_counted(self, key: int, tokens: int, how: str) -> None:
        self.attachment_tokens[key] = (tokens, how)
        self.show_attachments()

    def show_attachments(self) -> None:
        """Says (sig_attachments) which files the message being written in the chat shown has; while a sent
        message is edited, the files its new version sends (those it kept from the sent one marked kept)."""
        editing = self.editing is not None
        files = self.editing_files if editing else self.attached.get(self.front.chats.current, [])
        counted = [self.attachment_tokens.get(self.attachment_key.get(id(a), 0), (-1, "")) for a in files]
        kept = [(a.name in self.kept_names,) if editing else () for a in files]  # show_files' optional fifth
        self.front.sig_attachments.emit([(a.name, tokens, a.note, how, *k)
                                         for a, (tokens, how), k in zip(files, counted, kept)])


def attachments_of(message) -> list:
    """The Attachments a sent message carries (its meta keeps their texts)."""
    from .state.attachments import Attachment

    return [Attachment(a["name"], a["text"], a.get("kind", "text")) for a in message.meta.get("attachments") or []]
