"""Counts what the model would see, off the GUI thread, for the context meter.

A `TokenCounter` lives in its own QThread with its own `ChatFormat` of the loaded model (the engine's
worker is busy decoding; a tokenizer of its own costs a few megabytes). The controller asks with a
serial number; while the counter works, newer asks make older ones stale, and a stale ask is skipped
unread, so typing fast queues no backlog. Results come back as (serial, tokens, error).
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, Signal, Slot

from .context_fit import never_left_out

# what the meter asks about when the box is empty: whether the next message, short, could go. The turn
# before it is then no longer the newest, and may be left out (a big file's turn said "too long")
NEXT_MESSAGE = {"role": "user", "content": ""}

log = logging.getLogger(__name__)


class TokenCounter(QObject):
    # serial, tokens (-1 when not counted), why not ("" when counted), whether what the overflow policy can never
    # leave out (the newest turn, and the system prompt it keeps) fits the limit: False only when that was counted
    sig_counted = Signal(int, int, str, bool)
    # key, tokens of a text alone (an attachment; -1: not counted), how ("": the model's tokenizer counted;
    # else an estimate and why, or why it was not counted)
    sig_text_counted = Signal(int, int, str)

    def __init__(self):
        super().__init__()
        self.chat = None  # runtime.chat_format.ChatFormat of the loaded model
        self.remote = None  # runtime.remote.token_count.RemoteTokenCount of a model on a server
        self._latest = 0
        self._lock = threading.Lock()

    def ask(self, serial: int) -> None:
        """The GUI thread: `serial` is the newest ask; any older one still waiting is skipped."""
        with self._lock:
            self._latest = serial

    def _stale(self, serial: int) -> bool:
        with self._lock:
            return serial < self._latest

    @Slot(str)
    def use(self, folder: str) -> None:
        """The model in `folder` is the one to count for ("" : none)."""
        from runtime.api import ChatFormat

        self.chat = self.remote = None
        if not folder:
            return
        try:
            self.chat = ChatFormat(folder)
        except Exception as e:  # the engine loaded it; a counter that cannot is only a missing meter
            log.warning("no token counter for %s: %s", folder, e)

    def stop_remote(self) -> None:
        """Any thread (the app quits): a server's count in flight ends at once, so the thread can end."""
        remote = self.remote
        if remote is not None:
            remote.stop()

    @Slot(object)
    def use_remote(self, counter) -> None:
        """A model on a server is the one to count for: `counter` (a RemoteTokenCount) asks its server."""
        self.chat, self.remote = None, counter

    @Slot(int, object, bool, object, int, str)
    def count(self, serial: int, messages, thinking: bool, tools=None, limit: int = -1, policy: str = "") -> None:
        """`tools`: those the chat offers (the template renders them into the prompt), or None. A model on a
        server: its count, or an estimate, whose `why` says so (sig_counted's tokens are then not -1). Over
        `limit`, what `policy` can never leave out is counted too (app/context_fit.py), so the meter can say
        that leaving turns out will not make it fit."""
        if self._stale(serial):
            return
        if self.remote is not None and (messages or tools):
            self.sig_counted.emit(serial, *self.remote.count(messages, thinking, tools), True)
            return
        if self.chat is None and self.remote is None:
            self.sig_counted.emit(serial, -1, "no model is loaded", True)
            return
        if not messages and not tools:
            self.sig_counted.emit(serial, 0, "", True)
            return
        if not messages:  # an empty chat that offers tools: its prompt already holds them
            messages = ({"role": "user", "content": ""},)
        try:
            tokens = self._tokens(messages, thinking, tools)
            asking = tuple(messages) if messages[-1].get("role") == "user" else (*messages, NEXT_MESSAGE)
            alone_fits = (tokens <= limit or limit < 0  # (with the box empty, the next message is the newest turn)
                          or self._tokens(never_left_out(asking, policy), thinking, tools) <= limit)
        except Exception as e:  # a message the template refuses: the reply will say why in full
            self.sig_counted.emit(serial, -1, str(e), True)
            return
        self.sig_counted.emit(serial, tokens, "", alone_fits)

    def _tokens(self, messages, thinking: bool, tools) -> int:
        return len(self.chat.prompt_ids(list(messages), enable_thinking=thinking, tools=list(tools) if tools else None))

    @Slot(int, str)
    def count_text(self, key: int, text: str) -> None:
        """The tokens of `text` alone, as plain text (an attached file's share of the prompt)."""
        if self.remote is not None:
            self.sig_text_counted.emit(key, *self.remote.count_text(text))
            return
        if self.chat is None:
            self.sig_text_counted.emit(key, -1, "no model is loaded")
            return
        try:
            tokens, how = len(self.chat.tokenizer.encode(text, add_special_tokens=False)), ""
        except Exception as e:
            log.warning("counting an attachment: %s", e)
            tokens, how = -1, f"its text could not be counted: {e}"
        self.sig_text_counted.emit(key, tokens, how)
