"""The conversations: which chat is shown, the list, and what the user does to a chat (send, regenerate,
the versions of a message, rename, delete and undo, export and import, its settings).

The history (app/state/history.py) stores them; this is the one owner of the chat shown (`current`).
A reply in flight elsewhere keeps streaming into its own chat (app/replies.py); a chat shown again is
rebuilt from the history and that reply as far as it has got.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .chat_titles import auto_title
from .read_only import refuses_read_only
from .state.history import HistoryReadOnly, Message

NOT_LOADING = ("No model is loaded: your message stays in the box. Choose a model beside “Model” (or in the "
               "model manager) to send it.")


class Conversations:
    def __init__(self, front):
        self.front = front  # app/controller.py ChatController: the history, the other parts, the signals
        self.current: int | None = None
        self.search = ""  # the sidebar's search: the list stays filtered by it whatever refreshes it
        front.sig_reply_done.connect(self._title_after_reply)

    @property
    def history(self):
        return self.front.history

    def refresh(self, search: str | None = None) -> None:
        """Sends the list of chats (filtered by `search`, or by the last search when None) to the sidebar."""
        if search is not None:
            self.search = search
        self.front.sig_conversations.emit(self.history.conversations(self.search), self.current)

    @refuses_read_only
    def new(self) -> None:
        """A new chat, unless the one shown is still empty (then that one is the new chat)."""
        front = self.front
        front.composer.cancel_edit()
        if self.current is not None and not self.history.messages(self.current):
            self.refresh()
            return
        conv = self.history.new_conversation(system_prompt=front.settings.system_prompt)
        self.select(conv.id)
        notice = front.depth.avoid_estimated()  # new chats start on the default too
        if notice:
            front.sig_depth.emit(front.depth.name)
            front.sig_notice.emit(notice)

    def select(self, cid: int) -> None:
        """Shows chat `cid`; a reply in flight elsewhere keeps streaming into its own chat."""
        front = self.front
        if cid != self.current:
            front.composer.cancel_edit()
            self._drop_if_untouched(self.current)
        self.current = cid
        reply = front.replies.reply_in(cid)
        front.sig_chat_shown.emit(cid, self._messages_with_live(cid), reply.message_id if reply else None)
        self.refresh()
        front.steering.update_live_phase()
        front.composer.show_attachments()
        front.context.count()

    def _drop_if_untouched(self, cid: int | None) -> None:
        """A chat left without a message goes (Ctrl+N then a click on another chat left a "New chat" per
        time in the list and the history): unless it holds something of the user's, a draft, a file, its
        own system prompt or settings, or a name; a chat with messages is never dropped here."""
        front = self.front
        if cid is None or front.composer.draft(cid) or front.composer.attached.get(cid):
            return
        try:
            conv = self.history.conversation(cid)
            if conv.settings or conv.system_prompt != front.settings.system_prompt or conv.title_by:
                return
            if not self.history.messages(cid):  # (read first: a write waits while another program locks the file)
                self.history.drop_if_empty(cid)
        except (KeyError, HistoryReadOnly):  # (gone already, or a locked file: it stays, nothing is lost)
            pass

    def _messages_with_live(self, cid: int) -> list[Message]:
        """The stored messages, with a reply in flight as far as it has got (not only its last save)."""
        reply = self.front.replies.reply_in(cid)
        out = self.history.messages(cid)
        if reply is not None:
            answer, thinking = reply.texts()
            out = [dataclasses.replace(m, content=answer, thinking=thinking, meta=reply.meta(), complete=False)
                   if m.id == reply.message_id else m for m in out]
        return out

    def ensure(self) -> None:
        """Shows the newest chat, or a new one when there is none."""
        convs = self.history.conversations()
        if convs:
            self.select(convs[0].id)
        else:
            self.new()

    @refuses_read_only
    def rename(self, cid: int, title: str) -> None:
        self.history.rename(cid, title)
        self.refresh()

    @refuses_read_only
    def delete(self, cid: int) -> None:
        title = self.history.conversation(cid).title
        self.history.delete(cid)  # first: a delete the history refuses leaves the chat and its reply as they were
        self.front.queue.give_back(cid, say=False)  # (kept as the chat's draft, should it be undeleted)
        self.front.replies.stop(cid)
        self.front.sig_deleted.emit(cid, title)
        if self.current == cid:
            self.current = None
            self.ensure()
        else:
            self.refresh()

    @refuses_read_only
    def undelete(self, cid: int) -> None:
        self.history.undelete(cid)
        self.select(cid)

    # ------------------------------------------------------------------ sending and versions

    @refuses_read_only
    def send(self, text: str) -> bool:
        """Sends `text` in the current chat; while editing, as a new version of the edited message (the
        earlier version and what followed it stay, as the other branch). While this chat's reply streams,
        the message waits for its end (app/send_queue.py): Enter never stops a reply."""
        front, composer = self.front, self.front.composer
        text = text.strip()
        if self.current is None:
            self.new()
            if self.current is None:  # the history refused the new chat (the banner says why)
                return False
        files = composer.files_to_send(self.current)
        if not text and not files:
            return False
        if front.loaded is None:  # the message stays in the box; say why it did not go
            front.sig_notice.emit(NOT_LOADING if not front.loading else
                                  "The model is still loading: your message stays in the box. Press Enter again "
                                  "when the status bar says the model is ready.")
            return False
        cid = self.current
        if composer.editing is None and front.replies.reply_in(cid) is not None:
            front.queue.add(cid, text, files)
            composer.sent(cid)
            return True
        front.replies.stop(cid)  # (an edit) this chat's reply in flight; one in another chat goes on
        editing = composer.editing
        if editing is not None:  # `files`: the new version's, as its chips showed them (kept, removed, added)
            edited = next((m for m in self.history.messages(cid) if m.id == editing), None)
            composer.cancel_edit()  # (the draft's own files come back, for the next message)
            if edited is not None:
                self._branch_at(cid, edited.parent_id)
        self.post(cid, text, files)
        if editing is None:
            composer.sent(cid)  # (after: a message the history refused keeps its files, as its text stays in the box)
        return True

    def post(self, cid: int, text: str, files: list[dict]) -> None:
        """Adds the user's message to chat `cid` and starts its reply (a first message names the chat for
        now; its automatic title is made when the first reply ends, `_title_after_reply`)."""
        self.front.saves.write_waiting()  # what waits for the file goes first (or this send is refused too)
        if not self.history.messages(cid):
            self.history.title_automatically(cid, auto_title(text, [f.get("name", "") for f in files]), final=False)
        user = self.history.add_message(cid, "user", text, meta={"attachments": files} if files else None)
        self.refresh()
        self.front.replies.start(cid, [user])

    def _title_after_reply(self, cid: int, reply: Message) -> None:
        """Once a chat's first reply ends, its title from the first exchange, unless the user or an import
        named it (the history keeps theirs, `History.title_automatically`). A history that cannot be
        written keeps the chat's title as it is (the reply's own save has said why)."""
        try:
            if self.history.read_only or self.history.conversation(cid).title_by is not None:
                return
            shown = self.history.messages(cid)
            first = next((m for m in shown if m.role == "user"), None)
            first_reply = next((m for m in shown if m.role == "assistant"), None)
            # (a chat recovered from a damaged file may have no `title_by` and a long past: only a first
            # reply names a chat)
            if first is not None and first_reply is not None and first_reply.id == reply.id:
                files = [a.get("name", "") for a in first.meta.get("attachments") or []]
                self.history.title_automatically(cid, auto_title(first.content, files, reply.content, first.created))
        except (KeyError, HistoryReadOnly):  # (a chat purged meanwhile; a full disk)
            return

    @refuses_read_only
    def regenerate(self) -> None:
        """Answers the current chat's last question again, as a new version of its last reply (a reply in
        flight is stopped and kept as the other version); a last question left without a reply (the history
        was held by another program as it was sent) is answered."""
        cid = self.current
        msgs = self.history.messages(cid) if cid is not None else []
        unanswered = msgs and msgs[-1].role == "user" and self.front.replies.reply_in(cid) is None
        if unanswered and self.front.loaded is not None:
            self.front.composer.cancel_edit()
            self.front.replies.start(cid, [])
            return
        last = next((m for m in reversed(msgs) if m.role == "assistant"), None)
        if last is None or self.front.loaded is None:
            return
        self.front.replies.stop(cid)
        self.front.composer.cancel_edit()
        self._branch_at(cid, last.parent_id)
        self.front.replies.start(cid, [])

    def _branch_at(self, cid: int, parent: int) -> None:
        """The chat shows its branch up to message `parent` (0: nothing), where a new version starts;
        the view is rebuilt from it."""
        self.history.set_leaf(cid, parent)
        self.select(cid)

    @refuses_read_only
    def show_version(self, message_id: int, step: int) -> None:
        """The `< 1/2 >` of a message: shows its previous (step -1) or next (+1) version, and that version's
        newest continuation."""
        cid = self.current
        m = next((m for m in self.history.messages(cid) if m.id == message_id), None) if cid is not None else None
        if m is None or not m.versions:
            return
        i = m.versions.index(m.id) + step
        if 0 <= i < len(m.versions):
            self.front.composer.cancel_edit()
            self.history.show_version(cid, m.versions[i])
            self.select(cid)

    def chat_messages(self, cid: int, before: int | None = None) -> list[dict]:
        """What the next reply in chat `cid` is asked with: the system prompt and the finished turns (those
        before message `before` alone, when it is being edited)."""
        from runtime.api import replay_messages, saved_rounds

        conv = self.history.conversation(cid)
        messages = ([{"role": "system", "content": conv.system_prompt}] if conv.system_prompt else [])
        shown = self.history.messages(cid)
        if before is not None:
            shown = shown[:next((i for i, m in enumerate(shown) if m.id == before), len(shown))]
        for m in shown:
            if m.role not in ("user", "assistant") or not m.complete:
                continue
            if m.said_nothing:  # stopped before its first token: the question it leaves unanswered goes too, as
                # the user moved on from it (sent as an empty turn, the demo answered the old question 4 times in 7)
                if messages and messages[-1]["role"] == "user":
                    messages.pop()
                continue
            messages += replay_messages(saved_rounds(m.meta)) if m.role == "assistant" else []  # its tool rounds
            messages.append(m.as_chat())
        return messages

    # ------------------------------------------------------------------ files and settings

    def export_chat(self, path: str, as_json: bool) -> bool:
        """Writes the chat shown to `path`: JSON (every version, the reply details) or Markdown (to read)."""
        import json
        import os

        from .state.chat_files import chat_json, chat_markdown

        if self.current is None:
            return False
        text = json.dumps(chat_json(self.history, self.current), ensure_ascii=False, indent=1) if as_json \
            else chat_markdown(self.history, self.current)
        tmp = Path(f"{path}.part")
        try:
            tmp.write_text(text + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            self.front.sig_error.emit(f"The chat could not be exported to {path} ({e.strerror or e}); choose "
                                      "another folder.", "")
            return False
        self.front.sig_notice.emit(f"Exported “{self.history.conversation(self.current).title}” to {path}.")
        return True

    @refuses_read_only
    def import_chat(self, path: str) -> bool:
        """Adds the chat in the JSON file `path` (checked whole first: a bad file imports nothing)."""
        from .state.chat_files import ChatFileError, import_chat

        try:
            cid, note = import_chat(self.history, path)
        except ChatFileError as e:
            self.front.sig_error.emit(str(e), "")
            return False
        self.select(cid)
        self.front.sig_notice.emit(note)
        return True

    @refuses_read_only
    def set_system_prompt(self, prompt: str) -> None:
        """The chat shown's system prompt (a preset chosen in the window), for its next reply."""
        if self.current is not None:
            self.history.update_settings(self.current, prompt, self.history.conversation(self.current).settings)
            self.front.context.count()

    def settings(self) -> tuple[str, dict]:
        """The chat shown's (system prompt, settings)."""
        conv = self.history.conversation(self.current)
        return conv.system_prompt, conv.settings

    @refuses_read_only
    def set_settings(self, system_prompt: str, settings: dict) -> None:
        kept = self.history.conversation(self.current).settings  # keys the caller does not set (the tools switch)
        self.history.update_settings(self.current, system_prompt, {**kept, **settings})

    def tool_switch(self) -> tuple[bool, set[str]]:
        """The chat shown's tools switch: (tools offered, tools left out)."""
        from .tools_controller import chat_tool_settings

        return chat_tool_settings(self.settings()[1]) if self.current is not None else (True, set())

    @refuses_read_only
    def set_tool_switch(self, on: bool, off: set[str]) -> None:
        prompt, settings = self.settings()
        self.set_settings(prompt, {**settings, "tools": {"on": on, "off": sorted(off)}})
        self.front.context.count()
