"""The replies in flight: each tagged with its request id and bound to its own chat, never to a view.

Switching chats (or Ctrl+N) leaves a reply streaming into its own stored message, and a view that shows
that chat again picks it up live. Text and timings come from the runtime's events only (the per-token
deltas are joined once, here, to show and save the reply so far; the final text and timings are the Done
event's). The events come from the engine worker's outbox (app/event_outbox.py), taken on the ~30 Hz
flush (or at once for an event that is not a token); the view and the live strip get one update per
frame, never one per token, and frames come less often while they cost more than a tenth of a core
(app/frame_budget.py: the GUI thread takes that much of the GIL from the engine's worker at most).
SQLite gets the text about once a second, so a crash loses at most a second; while another program
holds the history's file, those saves wait in app/pending_saves.py.
The engine has one line: a reply in another chat waits for the one ahead to end; a message sent in a chat
whose reply streams waits for that reply (app/send_queue.py).
"""

from __future__ import annotations

import itertools

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from runtime.api import END_OF_TURN, LENGTH, STOP_STRING

from .frame_budget import FrameBudget
from .read_only import refuses_read_only
from .reply import Reply, TokenBatch, continuation, continue_refusal, sampling_for
from .state.history import HistoryBusy, HistoryReadOnly, Message
from .workers import PlainReply

ENDED_WELL = (END_OF_TURN, LENGTH, STOP_STRING)  # a reply that ended so worked: a failure before it no longer holds

FLUSH_MS, PERSIST_MS = 33, 1000
TOOL_EVENTS = ("tools_ready", "tool_call", "invalid_tool_call", "tool_result", "tool_round")


class Replies(QObject):
    _sig_generate = Signal(int, object, object, str)  # to the engine worker (queued: it lives in its own thread)

    def __init__(self, front):
        super().__init__(front)
        self.front = front  # app/controller.py ChatController: the history, the worker, the signals
        self.in_flight: dict[int, Reply] = {}  # request id -> reply, oldest first
        self._ids = itertools.count(1)
        self._points: list[tuple[float, str]] = []  # the shown reply's tokens of this frame, for the strip
        self._last_token = None  # the last of them (its submodel, phase and totals)
        self.failed_line = ""  # the error line of the last failed reply: a reply that ends well withdraws it
        worker = front.worker
        worker.sig_events.connect(self._take_events)
        worker.sig_reply_failed.connect(self._on_reply_failed)
        worker.sig_fitted.connect(self._on_fitted)
        worker.sig_overflow.connect(self._on_overflow)
        self._sig_generate.connect(worker.generate)
        front.tools.sig_consent.connect(self._consent_asked)
        self.flush_timer = QTimer(self)
        self.flush_timer.setInterval(FLUSH_MS)
        self.frame_budget = FrameBudget(FLUSH_MS)  # the flush's interval, stretched while frames cost
        self.flush_timer.timeout.connect(self._flush)
        self.persist_timer = QTimer(self)
        self.persist_timer.setInterval(PERSIST_MS)
        self.persist_timer.timeout.connect(self._persist)

    def _live(self) -> list[Reply]:
        return [r for r in self.in_flight.values() if not r.stopping]

    def reply_in(self, cid: int | None) -> Reply | None:
        """The reply streaming in chat `cid` (at most one; a stopped one waiting for its end does not count)."""
        return next((r for r in self._live() if r.conversation_id == cid), None)

    @property
    def busy(self) -> bool:
        return bool(self.in_flight)

    def _shown(self, r: Reply) -> bool:
        return r.conversation_id == self.front.chats.current

    # ------------------------------------------------------------------ start and stop

    def _request(self, cid: int, level, before: int | None = None, continued=None):
        from runtime.api import ChatRequest

        front = self.front
        conv = front.history.conversation(cid)
        return ChatRequest(tuple(front.chats.chat_messages(cid, before)), level.think, level.answer, level.budget,
                           front.settings.max_new_tokens, sampling_for(front.settings.sampling, conv.settings),
                           escalation=level.escalation, continued=continued)

    def start(self, cid: int, added: list[Message], overflow: str | None = None) -> None:
        """Starts a reply in chat `cid` after the messages just `added` (shown with it); `overflow`: what
        the worker does with a chat longer than the context (the settings' policy when None)."""
        from runtime.api import Controls, ElasticError, Progress

        front = self.front
        try:
            level = front.depth.level()
            request = self._request(cid, level)
        except ElasticError as e:
            front.sig_messages_added.emit(cid, added, None)
            front.sig_error.emit(str(e), "")
            return
        submodel, phase = level.think or level.answer, "thinking" if level.think else "answer"
        reply = Reply(next(self._ids), cid, 0, Controls(), level, submodel, phase, Progress(),
                      waits_for=self._ahead(cid))
        try:
            msg = front.history.add_message(cid, "assistant", "", meta=reply.meta(), complete=False)
        except HistoryBusy as e:  # taken between the question's save and this one: the question is kept
            if not added:
                raise
            front.sig_messages_added.emit(cid, added, None)
            front.sig_error.emit(str(HistoryBusy(e.name, "your message is saved, but its reply was not started",
                                                 "then Chat → Regenerate the last reply answers it")), "")
            return
        reply.message_id = msg.id
        self.in_flight[reply.request_id] = reply
        front.sig_messages_added.emit(cid, added + [msg], msg.id)
        self._announce(reply, submodel, phase)
        job = front.tools.job(reply.request_id, cid, request, front.history.conversation(cid).settings)
        self._sig_generate.emit(reply.request_id, job or request, reply.controls,
                                overflow or front.settings.context_overflow)

    def _announce(self, reply: Reply, submodel: str, phase: str) -> None:
        """A reply in flight, as the window learns it: where it streams, what it waits for, busy; then
        the frame and persist timers run until the last reply ends."""
        front = self.front
        front.sig_reply_started.emit(reply.conversation_id, reply.message_id, submodel, phase)
        if reply.waits_for:
            front.sig_reply_waiting.emit(reply.conversation_id, reply.message_id, reply.waits_for)
        front.sig_busy.emit(True)
        front.steering.update_live_phase()
        if not self.flush_timer.isActive():  # the first reply in flight: at the base rate again
            self.frame_budget.reset()
            self.flush_timer.setInterval(self.frame_budget.interval_ms)
        self.flush_timer.start()
        self.persist_timer.start()

    @refuses_read_only
    def continue_reply(self, message_id: int) -> None:
        """Continue: the shown chat's last reply, cut off by its token limit, goes on from where it stopped
        into the same message (its thought first, if it was cut mid-thought), at the depth it ran at."""
        from runtime.api import Controls, ElasticError, Progress

        front, cid = self.front, self.front.chats.current
        m = next((m for m in front.history.messages(cid) if m.id == message_id), None) if cid is not None else None
        why = continue_refusal(m, front.history.messages(cid) if m else [], front.worker.engine,
                               self.reply_in(cid) is not None)
        if why:
            front.sig_error.emit(f"This reply cannot be continued: {why}.", "")
            return
        try:
            level, continued = continuation(front.depth.level(), m)
            request = self._request(cid, level, before=m.id, continued=continued)
        except ElasticError as e:
            front.sig_error.emit(str(e), "")
            return
        phase = "thinking" if continued.thinks_on else "answer"
        submodel = level.think if continued.thinks_on else level.answer
        reply = Reply(next(self._ids), cid, m.id, Controls(), level, submodel, phase, Progress(),
                      waits_for=self._ahead(cid), before=dict(m.meta), prior_answer=m.content,
                      prior_thinking=m.thinking)
        front.saves.update_message(m.id, m.content, m.thinking, reply.meta(), complete=False)
        self.in_flight[reply.request_id] = reply
        front.chats.select(cid)  # the view rebuilds with the message streaming again
        self._announce(reply, submodel, phase)
        # (no tool loop: the continuation is asked without tools, so it cannot call one mid-answer)
        self._sig_generate.emit(reply.request_id, PlainReply(request), reply.controls, front.settings.context_overflow)

    def _ahead(self, cid: int) -> str:
        """What a reply sent now in chat `cid` waits for ("" when the engine is free; the banner says
        what it is). The engine has one line: another chat's reply, or a request to the local server."""
        ahead = next((x for x in self._live() if x.conversation_id != cid), None)
        if ahead is not None:
            title = self.front.history.conversation(ahead.conversation_id).title[:40]
            self.front.sig_notice.emit(f"This reply starts when the one in “{title}” ends (one reply at a "
                                       "time; stop that one there to start this one now).")
            return f"the reply in “{title}”"
        running = self.front.worker.queue.snapshot().running or ""
        if running.startswith("server"):  # (ServerControl.status names it so)
            self.front.sig_notice.emit("This reply starts when the local server's request ends (one reply at a "
                                       "time).")
            return "the local server's request"
        return ""

    def stop(self, cid: int | None = None) -> int:
        """Stops the replies in flight (the decode loop sees the flag within one token; each one's Done saves
        it): those of chat `cid` alone when given, else every one (a model load, an unload). Returns how many."""
        stopped = [r for r in self._live() if cid is None or r.conversation_id == cid]
        for r in stopped:
            r.controls.stop()
            self.front.tools.reply_ended(r.request_id)  # a consent it waits for is declined
            r.stopping = True
            self.front.steering.update_live_phase()
        return len(stopped)

    def stop_shown(self) -> None:
        """Esc and Stop: the reply of the chat shown, never one streaming in another chat."""
        if self.front.chats.current is not None:
            self.stop(self.front.chats.current)

    # ------------------------------------------------------------------ the events

    @Slot()
    def _take_events(self) -> None:
        """Everything the engine said since the last look, in order; then the strip's frame."""
        for request_id, event in self.front.worker.outbox.take():
            self._on_event(request_id, event)
        self._strip_frame()

    def _strip_frame(self) -> None:
        """The live strip's update for the tokens taken since the last one: one signal, whatever their number."""
        if self._points:
            t = self._last_token
            p = t.progress
            self.front.sig_tokens.emit(TokenBatch(tuple(self._points), t.submodel, t.phase, p.ttft_ms,
                                                  p.tokens_per_s))
            self._points, self._last_token = [], None

    def _on_event(self, request_id: int, event) -> None:
        r = self.in_flight.get(request_id)
        if r is None:
            return  # a late event of a reply already closed
        kind, r.progress = event.type, getattr(event, "progress", None) or r.progress  # (a tool result has none)
        if kind != "token":
            self._strip_frame()  # the tokens before it reach the strip before what it says
        if not r.begun:  # its first event: its turn came (a remote model sends no Prefill)
            r.begun = True
            self.front.sig_reply_waiting.emit(r.conversation_id, r.message_id, "")
            self.front.steering.update_live_phase()
        if kind == "prefill":  # the view stops saying it waits
            r.submodel, r.dirty = event.submodel, True
        elif kind == "token":
            self._on_token(r, event)
        elif kind == "switch":
            self._on_switch(r, event)
        elif kind in TOOL_EVENTS:
            self._on_tool_event(r, event)
        elif kind == "done":
            self._finish(r, event)

    def _on_token(self, r: Reply, event) -> None:
        (r.thinking if event.phase == "thinking" else r.answer).append(event.text)
        phase_changed = r.phase != event.phase
        r.phase, r.submodel, r.dirty = event.phase, event.submodel, True
        if phase_changed:
            self.front.steering.update_live_phase()
        if not r.stopping and event.token_id is not None and self._shown(r):
            # (a Token of no new token only releases text; the strip shows the chat on screen alone)
            self._points.append((event.latency_ms, event.submodel))
            self._last_token = event

    def _on_switch(self, r: Reply, event) -> None:
        r.switches.append(event)
        r.submodel = event.to_submodel
        if event.reason == "answer":  # thinking is over: the answering submodel takes over
            r.phase = "answer"
            self.front.steering.update_live_phase()
        if not r.stopping and self._shown(r):
            self.front.sig_switch.emit(event.from_submodel, event.to_submodel, event.reprefill_tokens, event.ms,
                                       event.reason)

    @Slot(int, object, object)
    def _consent_asked(self, request_id: int, call, box) -> None:
        """A call waits for the user's consent: shown as asking, and the window asks (sig_consent)."""
        r = self.in_flight.get(request_id)
        if r is None or r.stopping:
            self.front.tools.answered(request_id, box, "decline")
            return
        for c in r.calls:
            if c["id"] == call.id:
                c["status"], c["server"] = "asking", call.server
        self.front.sig_tool_rounds.emit(r.conversation_id, r.message_id, r.shown_rounds())
        self.front.sig_consent.emit(request_id, call, box)

    def _on_tool_event(self, r: Reply, event) -> None:
        """A tool event of the reply's loop (runtime/tool_loop.py): the calls shown live, then each round's
        record; a round's texts move into its record and the next round streams afresh."""
        kind = event.type
        if kind == "tools_ready":
            for problem in event.problems:
                self.front.sig_error.emit(problem, "")
            return
        if kind == "tool_call":
            r.calls.append({"id": event.id, "name": event.name, "server": "", "arguments": event.arguments,
                            "content": "", "is_error": False, "status": "pending", "ms": 0})
        elif kind == "tool_result":
            r.calls = [c for c in r.calls if c["id"] != event.id] + [event.to_dict()]
        elif kind == "tool_round":
            r.rounds.append(event.to_dict())
            r.calls, r.thinking, r.answer, r.dirty = [], [], [], True
        if not r.removed:
            self.front.sig_tool_rounds.emit(r.conversation_id, r.message_id, r.shown_rounds())

    @Slot(int, int, int)
    def _on_fitted(self, request_id: int, tokens: int, dropped: int) -> None:
        r = self.in_flight.get(request_id)
        if r is not None:
            r.prompt_tokens, r.dropped = tokens, dropped
            if dropped and not r.removed and self._shown(r):
                self.front.sig_notice.emit(f"This chat is longer than the context: its {dropped} earliest message"
                                           f"{'s were' if dropped > 1 else ' was'} left out of this reply (Settings "
                                           "→ Defaults: context length, and what to do when a chat is longer).")

    @Slot(int, int, int, int, bool)
    def _on_overflow(self, request_id: int, tokens: int, limit: int, context: int, trimmable: bool) -> None:
        """The reply could not start: its chat does not fit. Its empty message goes; the question stays,
        and the window offers what to do (app/overflow.py)."""
        r = self.in_flight.get(request_id)
        if r is None:
            return
        if r.before:  # a Continue with no room left: the cut reply stays as it was, and can be regenerated
            self._close(r, r.prior_answer, r.prior_thinking, r.before)
            self.front.sig_error.emit("This reply cannot be continued: the chat with it fills the context. "
                                      "Regenerate it, or raise the context length (Settings → Defaults).", "")
            return
        r.removed = True
        self.front.queue.give_back(r.conversation_id)  # what waited would not fit either
        self.front.saves.delete_message(r.conversation_id, r.message_id)  # (waits while the file is held)
        self.front.overflow.mark_not_sent(r.conversation_id, r.message_id)
        self._close(r, "", "", {})
        if self._shown(r):
            self.front.chats.select(r.conversation_id)
        self.front.overflow.offer(r.conversation_id, tokens, limit, context, trimmable)

    @Slot(int, str)
    def _on_reply_failed(self, request_id: int, message: str) -> None:
        r = self.in_flight.get(request_id)
        if r is not None:  # (a Continue that failed leaves its reply cut, as it was, to continue again)
            self._close(r, *r.texts(), {**r.meta(), "finish_reason": "length" if r.before else "error",
                                        "error": message})
            self.report_failure(message)

    def report_failure(self, message: str) -> None:
        """The error line for a failed reply; out of memory, it offers the next lower depth."""
        lower = self.front.depth.lower() if "memory" in message.lower() else None
        hint = f" Try the lower reasoning depth {lower}." if lower else ""
        self.failed_line = f"The reply failed: {message}.{hint}"
        self.front.sig_error.emit(self.failed_line, lower or "")

    # ------------------------------------------------------------------ showing, saving, ending

    def _flush(self) -> None:
        self.frame_budget.start()
        self._take_events()
        for r in self._live():
            if r.dirty:
                r.dirty = False
                self.front.sig_stream.emit(r.conversation_id, r.message_id, *r.texts(), r.submodel,
                                           r.phase == "thinking", r.progress)
        interval = self.frame_budget.end()
        if interval != self.flush_timer.interval() and self.flush_timer.isActive():  # (the last reply ended)
            self.flush_timer.setInterval(interval)

    @refuses_read_only
    def _persist(self) -> None:
        for r in self.in_flight.values():
            if not r.removed:
                self.front.saves.update_message(r.message_id, *r.texts(), r.meta(), complete=False)

    def _finish(self, r: Reply, done) -> None:
        if r.removed:  # nothing to save or show: its message is gone, and its id may be the new reply's
            self._close(r, "", "", {})
            return
        r.switches = list(done.switches)
        meta = r.joined({**r.own_meta(), "think_submodel": done.think_submodel, "answer_submodel": done.answer_submodel,
                         "thinking_budget": done.thinking_budget,
                         **{k: v for k, v in done.to_dict().items() if k != "type"}})
        self._close(r, r.prior_answer + done.answer_text, r.prior_thinking + done.thinking_text, meta)
        if done.finish_reason == "error":
            self.report_failure(done.error or "unknown error")
        if self._shown(r):
            self.front.sig_done.emit(done)

    def _close(self, r: Reply, answer: str, thinking: str, meta: dict) -> None:
        front = self.front
        del self.in_flight[r.request_id]
        front.tools.reply_ended(r.request_id)
        if not self.in_flight:
            self.flush_timer.stop()
            self.persist_timer.stop()
        front.steering.update_live_phase()
        front.queue.reply_ended(r.conversation_id)  # a message sent while it streamed goes next
        if r.removed:
            front.sig_busy.emit(self.busy)
            return
        finished = None
        try:
            finished = front.saves.update_message(r.message_id, answer, thinking, meta, complete=True)
        except HistoryReadOnly as e:  # a full disk: the reply is shown, the banner says it is not saved
            # (a file another program holds is no error here: the save waits for it, app/pending_saves.py)
            front.sig_error.emit(str(e), "")
        front.sig_reply_done.emit(r.conversation_id, Message(r.message_id, r.conversation_id, "assistant", answer,
                                                             thinking, meta, True, finished=finished))
        if meta.get("finish_reason") in ENDED_WELL and self.failed_line:  # the failure no longer holds
            front.sig_error_withdrawn.emit(self.failed_line)
            self.failed_line = ""
        front.sig_busy.emit(self.busy)
        front.chats.refresh()
        if self._shown(r):
            front.context.count()

    def stop_for_exit(self) -> None:
        """At exit, before the engine's thread ends: every reply is told to stop, nothing more is shown."""
        self.flush_timer.stop()
        self.persist_timer.stop()
        for r in self.in_flight.values():
            r.controls.stop()

    def save_at_exit(self) -> None:
        """At exit, once the engine's thread has ended: its last events are taken in, and what the replies
        that did not end had is saved as stopped."""
        self._take_events()
        for r in list(self.in_flight.values()):
            self._close(r, *r.texts(), {**r.meta(), "finish_reason": "stopped"})
