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

log = logging.getLogger(__name__)


class TokenCounter(QObject):
    sig_counted = Signal(int, int, str)  # serial, tokens (-1 when not counted), why not ("" when counted)
    sig_text_counted = Signal(int, int)  # key, tokens of a text alone (an attachment; -1: not counted)

    def __init__(self):
        super().__init__()
        self.chat = None  # runtime.chat_format.ChatFormat of the loaded model
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

        self.chat = None
        if not folder:
            return
        try:
            self.chat = ChatFormat(folder)
        except Exception as e:  # the engine loaded it; a counter that cannot is only a missing meter
            log.warning("no token counter for %s: %s", folder, e)

    @Slot(int, object, bool, object)
    def count(self, serial: int, messages, thinking: bool, tools=None) -> None:
        """`tools`: those the chat offers (the template renders them into the prompt), or None."""
        if self._stale(serial):
            return
        if self.chat is None:
            self.sig_counted.emit(serial, -1, "no model is loaded")
            return
        if not messages and not tools:
            self.sig_counted.emit(serial, 0, "")
            return
        if not messages:  # an empty chat that offers tools: its prompt already holds them
            messages = ({"role": "user", "content": ""},)
        try:
            tokens = len(self.chat.prompt_ids(list(messages), enable_thinking=thinking,
                                              tools=list(tools) if tools else None))
        except Exception as e:  # a message the template refuses: the reply will say why in full
            self.sig_counted.emit(serial, -1, str(e))
            return
        self.sig_counted.emit(serial, tokens, "")

    @Slot(int, str)
    def count_text(self, key: int, text: str) -> None:
        """The tokens of `text` alone, as plain text (an attached file's share of the prompt)."""
        try:
            tokens = len(self.chat.tokenizer.encode(text, add_special_tokens=False)) if self.chat else -1
        except Exception as e:
            log.warning("counting an attachment: %s", e)
            tokens = -1
        self.sig_text_counted.emit(key, tokens)
