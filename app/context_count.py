"""The context meter's count: how many tokens the next reply's prompt in the chat shown holds (the draft,
its files and the tools offered included), against what the context leaves the reply room for.

The counting runs in a thread of its own (app/token_counter.py), so typing never waits for a tokenizer;
a newer ask makes an older one stale. The answer comes as the front's `sig_context`.

A model on a server is counted by the server where it has a tokenizer route (llama.cpp's and vLLM's
/tokenize, an Elastic Chat server's count_tokens: runtime/remote/token_count.py); elsewhere the count
is estimated from the characters, and the answer's `why` says so and why (the meter shows "estimated").
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from .state.history import Message
from .token_counter import TokenCounter
from .workers import start_in_thread, stop_thread

COUNT_MS = 250  # the meter counts a draft this long after the typing pauses


class ContextCount(QObject):
    # requests to the token counter (queued: it lives in its own thread)
    # serial, messages, thinking, the tools offered (or None), the most a prompt may hold, the overflow policy
    _sig_count = Signal(int, object, bool, object, int, str)
    _sig_count_model = Signal(str)
    _sig_count_remote = Signal(object)
    _sig_count_text = Signal(int, str)

    def __init__(self, front):
        super().__init__(front)
        self.front = front  # app/controller.py ChatController
        self.counter = TokenCounter()
        self.counter_thread = start_in_thread(self.counter, "tokens")
        self.counter.sig_counted.connect(self._on_counted)
        self._sig_count.connect(self.counter.count)
        self._sig_count_model.connect(self.counter.use)
        self._sig_count_remote.connect(self.counter.use_remote)
        self._sig_count_text.connect(self.counter.count_text)
        self._serial = 0
        self.remote = False  # the loaded model is a server's: its server counts, or the count is estimated
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(COUNT_MS)
        self.timer.timeout.connect(self.count)

    def use_model(self, folder: str) -> None:
        """Counts with the tokenizer of the model in `folder` ("": none is loaded; a server's spec: with the
        loaded engine's prompt counter, which asks the server or estimates)."""
        from runtime.api import is_spec

        self.remote = is_spec(folder)
        engine = getattr(self.front.worker, "engine", None) if self.remote else None
        if engine is not None and hasattr(engine, "prompt_counter"):
            self._sig_count_remote.emit(engine.prompt_counter())
        else:
            self._sig_count_model.emit("" if self.remote else folder)

    def count_text(self, key: int, text: str) -> None:
        """Counts `text` alone (an attachment); the answer comes as the counter's sig_text_counted."""
        self._sig_count_text.emit(key, text)

    def count_later(self) -> None:
        """Counts once the typing pauses."""
        self.timer.start()

    def limits(self) -> tuple[int, int]:
        """(the most tokens a prompt may hold and leave the reply its room, the context length)."""
        from .context_fit import reply_room

        front = self.front
        context = front.loaded.status.max_context if front.loaded else front.settings.context
        return context - reply_room(context, front.settings.max_new_tokens), context

    def count(self) -> None:
        """Asks the counter for the next reply's prompt in the chat shown, the draft included (the answer
        comes as `sig_context`); a newer ask makes an older one stale."""
        from runtime.api import ElasticError

        front, cid = self.front, self.front.chats.current
        self.timer.stop()
        limit, context = self.limits()
        if front.loaded is None or cid is None:
            front.sig_context.emit(-1, limit, context, "no model is loaded", True)
            return
        editing = front.composer.editing
        try:
            level = front.depth.level()
            messages = front.chats.chat_messages(cid, before=editing)  # an edited message replaces what followed
        except (ElasticError, KeyError) as e:
            front.sig_context.emit(-1, limit, context, str(e), True)
            return
        text, files = front.composer.next_message(cid)
        if text.strip() or files:
            messages.append(Message(0, cid, "user", text.strip(), meta={"attachments": files}).as_chat())
        self._serial += 1
        self.counter.ask(self._serial)
        tools = front.tools.offered_tools(front.chats.settings()[1])  # their text is in the prompt too
        self._sig_count.emit(self._serial, tuple(messages), level.think is not None and level.budget != 0, tools,
                             limit, front.settings.context_overflow)

    @Slot(int, int, str, bool)
    def _on_counted(self, serial: int, tokens: int, why: str, alone_fits: bool) -> None:
        if serial == self._serial:
            loaded = self.front.loaded
            if tokens >= 0 and loaded is not None and not getattr(loaded.status, "context_known", True):
                why = "; ".join(filter(None, (why, "the server did not say its context length, so this program's "
                                                   "default is assumed")))
            self.front.sig_context.emit(tokens, *self.limits(), why, alone_fits)

    def shutdown(self) -> None:
        self.timer.stop()
        self.counter.blockSignals(True)
        self.counter.stop_remote()
        stop_thread(self.counter_thread)
