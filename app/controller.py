"""The chat controller: app state on the GUI thread, between the widgets and the workers.

It owns the history, the settings, the engine worker's thread and the reply in progress.
Tokens arrive per event from the worker; text is buffered and handed to the view on a
~30 Hz timer, and written to SQLite about once a second, so a crash loses at most a second.
Every reply has a request id; events of any other id are dropped.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from .history import History, Message
from .settings import Settings
from .workers import EngineWorker, LoadedModel, start_in_thread, stop_thread

log = logging.getLogger(__name__)
FLUSH_MS, PERSIST_MS = 33, 1000


@dataclass
class Reply:
    request_id: int
    conversation_id: int
    message_id: int
    controls: object
    stop: object  # the depth stop used
    started: float = field(default_factory=time.monotonic)
    thinking: list[str] = field(default_factory=list)
    answer: list[str] = field(default_factory=list)
    phase: str = "thinking"
    submodel: str = ""
    first_token: float | None = None
    thinking_end: float | None = None
    switch: dict = field(default_factory=dict)
    dirty: bool = False


class ChatController(QObject):
    sig_model_loaded = Signal(object)  # LoadedModel
    sig_model_failed = Signal(str)
    sig_conversations = Signal(object, object)  # list[Conversation], current id
    sig_messages = Signal(object)  # list[Message]
    sig_reply_started = Signal(int)  # message id
    sig_stream = Signal(str, str, str, bool)  # answer, thinking, submodel, thinking live
    sig_token = Signal(str, str, float, float)  # submodel, phase, latency ms, seconds since first token
    sig_switch = Signal(str, str, int, float)
    sig_reply_done = Signal(int, object)  # message id, Message
    sig_done = Signal(object)  # the runtime's Done event (for the live strip)
    sig_error = Signal(str)
    sig_busy = Signal(bool)
    sig_deleted = Signal(int, str)  # conversation id, title (for the undo banner)
    # requests to the engine worker (queued: it lives in its own thread)
    _sig_load = Signal(str, str, bool)
    _sig_generate = Signal(int, object, object)

    def __init__(self, data_dir: Path, settings: Settings, settings_path: Path):
        super().__init__()
        self.data_dir, self.settings, self.settings_path = Path(data_dir), settings, settings_path
        self.history = History(self.data_dir / "history.sqlite3")
        self.history.purge_deleted(older_than_s=24 * 3600)
        self.current: int | None = None
        self.loaded: LoadedModel | None = None
        self.reply: Reply | None = None
        self._ids = itertools.count(1)
        self.worker = EngineWorker(settings.context)
        self.thread = start_in_thread(self.worker, "engine")
        self.worker.sig_loaded.connect(self._on_loaded)
        self.worker.sig_load_failed.connect(self._on_load_failed)
        self.worker.sig_event.connect(self._on_event)
        self.worker.sig_reply_failed.connect(self._on_reply_failed)
        self._sig_load.connect(self.worker.load)
        self._sig_generate.connect(self.worker.generate)
        self.flush_timer = QTimer(self)
        self.flush_timer.setInterval(FLUSH_MS)
        self.flush_timer.timeout.connect(self._flush)
        self.persist_timer = QTimer(self)
        self.persist_timer.setInterval(PERSIST_MS)
        self.persist_timer.timeout.connect(self._persist)

    # ------------------------------------------------------------------ model

    def load_model(self, folder: str, resident: str = "", is_demo: bool = False) -> None:
        self.stop()
        self._sig_load.emit(folder, resident, is_demo)

    @Slot(object)
    def _on_loaded(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.sig_model_loaded.emit(loaded)

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self.sig_model_failed.emit(message)

    # ------------------------------------------------------------------ conversations

    def refresh_conversations(self, search: str = "") -> None:
        self.sig_conversations.emit(self.history.conversations(search), self.current)

    def new_conversation(self) -> None:
        self.stop()
        conv = self.history.new_conversation(system_prompt=self.settings.system_prompt)
        self.select(conv.id)

    def select(self, cid: int) -> None:
        if self.reply is not None and self.reply.conversation_id != cid:
            self.stop()
        self.current = cid
        self.sig_messages.emit(self.history.messages(cid))
        self.refresh_conversations()

    def ensure_conversation(self) -> None:
        convs = self.history.conversations()
        if convs:
            self.select(convs[0].id)
        else:
            self.new_conversation()

    def rename(self, cid: int, title: str) -> None:
        self.history.rename(cid, title)
        self.refresh_conversations()

    def delete(self, cid: int) -> None:
        title = self.history.conversation(cid).title
        if self.reply is not None and self.reply.conversation_id == cid:
            self.stop()
        self.history.delete(cid)
        self.sig_deleted.emit(cid, title)
        if self.current == cid:
            self.current = None
            self.ensure_conversation()
        else:
            self.refresh_conversations()

    def undelete(self, cid: int) -> None:
        self.history.undelete(cid)
        self.select(cid)

    def conversation_settings(self) -> tuple[str, dict]:
        conv = self.history.conversation(self.current)
        return conv.system_prompt, conv.settings

    def set_conversation_settings(self, system_prompt: str, settings: dict) -> None:
        self.history.update_settings(self.current, system_prompt, settings)

    # ------------------------------------------------------------------ replies

    @property
    def busy(self) -> bool:
        return self.reply is not None

    def send(self, text: str, depth: str) -> bool:
        text = text.strip()
        if not text or self.loaded is None:
            return False
        if self.current is None:
            self.new_conversation()
        if self.busy:
            self._finish_locally("stopped")
        if not self.history.messages(self.current):
            self.history.rename(self.current, text.splitlines()[0][:48])
        self.history.add_message(self.current, "user", text)
        self.refresh_conversations()
        self._start_reply(depth)
        return True

    def regenerate(self, depth: str) -> None:
        msgs = self.history.messages(self.current) if self.current else []
        last = next((m for m in reversed(msgs) if m.role == "assistant"), None)
        if last is None or self.busy:
            return
        self.history.delete_messages_from(self.current, last.id)
        self._start_reply(depth)

    def edit(self, message_id: int, text: str, depth: str) -> bool:
        """Replaces a sent message (and everything after it) and answers again."""
        if self.busy or not text.strip():
            return False
        self.history.delete_messages_from(self.current, message_id)
        return self.send(text, depth)

    def _request(self, depth_name: str):
        from runtime.depth import find_stop
        from runtime.generate import ChatRequest
        from runtime.sampling import SamplingSettings

        stop = find_stop(list(self.loaded.stops), depth_name)
        conv = self.history.conversation(self.current)
        sampling = {**vars(self.settings.sampling), **conv.settings.get("sampling", {})}
        messages = ([{"role": "system", "content": conv.system_prompt}] if conv.system_prompt else [])
        messages += [m.as_chat() for m in self.history.messages(self.current) if m.role in ("user", "assistant")]
        request = ChatRequest(tuple(messages), stop.think, stop.answer, stop.budget, self.settings.max_new_tokens,
                              SamplingSettings(float(sampling["temperature"]), float(sampling["top_p"]),
                                               int(sampling["top_k"]), float(sampling["min_p"])))
        return request, stop

    def _start_reply(self, depth: str) -> None:
        from runtime.engine import Controls
        from runtime.errors import ElasticError

        try:
            request, stop = self._request(depth)
        except ElasticError as e:
            self.sig_error.emit(str(e))
            self.sig_messages.emit(self.history.messages(self.current))
            return
        msg = self.history.add_message(self.current, "assistant", "", complete=False)
        self.reply = Reply(next(self._ids), self.current, msg.id, Controls(), stop,
                           phase="thinking" if stop.think else "answer", submodel=stop.think or stop.answer)
        self.sig_messages.emit(self.history.messages(self.current)[:-1])
        self.sig_reply_started.emit(msg.id)
        self.sig_busy.emit(True)
        self.flush_timer.start()
        self.persist_timer.start()
        self._sig_generate.emit(self.reply.request_id, request, self.reply.controls)

    def stop(self) -> None:
        """Esc: the decode loop sees the flag within one token (it does not wait in a queue)."""
        if self.reply is not None:
            self.reply.controls.stop()

    @Slot(int, object)
    def _on_event(self, request_id: int, event) -> None:
        r = self.reply
        if r is None or request_id != r.request_id:
            return  # a late event of a reply that was stopped or replaced
        kind = event.type
        if kind == "token":
            now = time.monotonic()
            r.first_token = r.first_token or now
            if event.phase == "answer" and r.thinking_end is None and r.stop.think:
                r.thinking_end = now
            (r.thinking if event.phase == "thinking" else r.answer).append(event.text)
            r.phase, r.submodel, r.dirty = event.phase, event.submodel, True
            self.sig_token.emit(event.submodel, event.phase, event.latency_ms, now - r.first_token)
        elif kind == "switch":
            r.switch = {"from": event.from_submodel, "to": event.to_submodel, "tokens": event.reprefill_tokens,
                        "ms": round(event.ms, 1)}
            r.submodel = event.to_submodel
            self.sig_switch.emit(event.from_submodel, event.to_submodel, event.reprefill_tokens, event.ms)
        elif kind == "done":
            self._finish(event)

    @Slot(int, str)
    def _on_reply_failed(self, request_id: int, message: str) -> None:
        if self.reply is not None and request_id == self.reply.request_id:
            self._finish_locally("error")
            self.sig_error.emit(f"The reply failed: {message}")

    def _flush(self) -> None:
        r = self.reply
        if r is not None and r.dirty:
            r.dirty = False
            self.sig_stream.emit("".join(r.answer), "".join(r.thinking), r.submodel, r.phase == "thinking")

    def _persist(self) -> None:
        r = self.reply
        if r is not None:
            self.history.update_message(r.message_id, "".join(r.answer), "".join(r.thinking), complete=False)

    def _finish(self, done) -> None:
        r = self.reply
        thinking_end = r.thinking_end or time.monotonic()
        meta = {
            "think_submodel": done.think_submodel, "answer_submodel": done.answer_submodel,
            "thinking_budget": done.thinking_budget, "thinking_tokens": done.thinking_tokens,
            "answer_tokens": done.answer_tokens, "budget_hit": done.budget_hit, "ttft_ms": done.ttft_ms,
            "tokens_per_s": done.tokens_per_s, "finish_reason": done.finish_reason, "depth": r.stop.name,
            "thinking_ms": round(1000 * (thinking_end - r.started), 1) if done.think_submodel else 0,
            "total_ms": round(1000 * (time.monotonic() - r.started), 1), "switch": r.switch,
        }
        self._close(done.answer_text, done.thinking_text, meta)
        if done.finish_reason == "error":
            hint = " Try a lower reasoning depth." if "memory" in (done.error or "").lower() else ""
            self.sig_error.emit(f"The reply failed: {done.error}.{hint}")
        self.sig_done.emit(done)

    def _finish_locally(self, reason: str) -> None:
        r = self.reply
        meta = {"finish_reason": reason, "think_submodel": r.stop.think, "answer_submodel": r.stop.answer,
                "depth": r.stop.name, "switch": r.switch}
        r.controls.stop()
        self._close("".join(r.answer), "".join(r.thinking), meta)

    def _close(self, answer: str, thinking: str, meta: dict) -> None:
        r = self.reply
        self.reply = None
        self.flush_timer.stop()
        self.persist_timer.stop()
        self.history.update_message(r.message_id, answer, thinking, meta, complete=True)
        message = Message(r.message_id, r.conversation_id, "assistant", answer, thinking, meta, True)
        self.sig_reply_done.emit(r.message_id, message)
        self.sig_busy.emit(False)
        self.refresh_conversations()

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Stop the reply, save it, stop the engine thread; explicit, in this order."""
        if self.reply is not None:
            self._finish_locally("stopped")
        self.worker.blockSignals(True)
        stop_thread(self.thread)
        self.settings.save(self.settings_path)
        self.history.close()
