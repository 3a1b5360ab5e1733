"""A reply from a remote server as the same events as a local one (runtime/events.py): Token (with
phase and submodel), Switch, Done, each carrying the running totals, the Token texts joined being
exactly Done's texts. A remote reply has no Prefill event (an OpenAI-compatible server does not say
what it prefilled until the end) and its Tokens have no ids (`token_id` is None): a streamed chunk
that carries text is one token, as `runtime serve` and vLLM send them.

How depth runs depends on the server (models.py's modes):

- ELASTIC: one request; the server thinks, switches and answers as it does in-process, and tells
  each switch on the next token's chunk (`elastic.switch`) and how the reply ended on the last one.
- PAIRS: the thinker's model thinks (this client ends the thought by the budget rule of
  reply_record.py: at the first line end after the budget, or the grace after it), then the answerer's model continues
  from the same prompt and closed thought: a prefilled assistant turn continued as the answer
  (`continue_final_message`, in the form the server reads: server_kind.py). A server that starts a
  new thought instead is refused in one line.
- SINGLE: one request; depth is `chat_template_kwargs.enable_thinking`, the thinking budget in the
  field the server reads (server_kind.py: vLLM's `thinking_token_budget`, llama.cpp's
  `thinking_budget_tokens`) and `reasoning_effort` (low, medium, high), which the server honours or not.

Continue (`request.continued`, PAIRS and SINGLE): the cut reply is the conversation's final assistant
turn, with the fields that make its engine go on with it (continuation.py says where it can); a thought
cut midway thinks on with what is left of its budget (ThinkingBudget.for_continued_thought).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from ..controls import Controls
from ..depth import effort_levels
from ..errors import ElasticError, show
from ..events import (
    ANSWER,
    END_OF_TURN,
    ENDED_BY_MODEL,
    ERROR,
    FINISH_REASONS,
    LENGTH,
    STOPPED,
    THINKING,
    THINKING_ENDS,
    TOOL_CALLS,
    Event,
    Switch,
    Token,
)
from ..reply_record import ReplyRecord, ThinkingBudget
from .client import RemoteDropped, RemoteError, RemoteStopped
from .continuation import continue_refusal, cut_thought_tokens, cut_turn
from .models import ELASTIC, PAIRS

log = logging.getLogger(__name__)
FINISH = {"stop": END_OF_TURN, "length": LENGTH}
ENGINE_FINISH = set(FINISH_REASONS) - {TOOL_CALLS}  # (no tools are passed to a server yet)
MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")
THINK_CLOSE = "</think>"


def stream_remote(engine, request, controls: Controls | None = None) -> Iterator[Event]:
    """Token..., [Switch, Token...], Done (always last), from `engine` (a RemoteEngine)."""
    return _RemoteReply(engine, request, controls or Controls()).run()


class _Chunk:
    """One `chat.completion.chunk`, checked: its texts by phase, its finish reason, its elastic object."""

    def __init__(self, data: dict, address: str):
        error = data.get("error")
        if error is not None:
            said = error.get("message") if isinstance(error, dict) else error
            raise RemoteError(f"the server at {address} failed mid-reply: {show(said, 200)}; the reply "
                              "was cut there")
        choices = data.get("choices")
        if not isinstance(choices, list) or len(choices) > 1:
            raise RemoteError(f"the server at {address} sent a chunk without one choice; it is not a chat "
                              "completions stream this program can read")
        self.elastic = data.get("elastic") if isinstance(data.get("elastic"), dict) else {}
        self.texts: list[tuple[str, str]] = []  # (phase, text), thinking first
        self.finish: str | None = None
        self.any = bool(choices)
        self.token = False  # whether it carries a token (text or a piece of a tool call): max_tokens counts it
        if not choices:  # the usage chunk
            return
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            raise RemoteError(f"the server at {address} sent a choice without a delta object")
        thought = next((delta[k] for k in ("reasoning_content", "reasoning") if delta.get(k) is not None), None)
        for phase, text in ((THINKING, thought), (ANSWER, delta.get("content"))):
            if text is None:
                continue
            if not isinstance(text, str):
                raise RemoteError(f"the server at {address} sent a text that is not a string")
            self.texts.append((phase, text))
        finish = choice.get("finish_reason")
        if finish is not None and not (isinstance(finish, str) and len(finish) <= 64):
            raise RemoteError(f"the server at {address} sent a finish reason that is not a short name")
        self.finish = finish
        self.token = any(text for _, text in self.texts) or bool(delta.get("tool_calls"))

    @classmethod
    def cut_at_length(cls) -> _Chunk:
        """The end this client gives a stream that went past its max_tokens: what an honest server says then."""
        return cls({"choices": [{"delta": {}, "finish_reason": "length"}]}, "")


class _RemoteReply:
    def __init__(self, engine, request, controls: Controls):
        self.engine, self.server, self.model = engine, engine.server, engine.model
        self.req, self.controls = request, controls
        for name in filter(None, (request.think_submodel, request.answer_submodel)):
            if name not in self.model.submodels:
                raise RemoteError(f"the server's model {show(self.model.id)} has no submodel {show(name)}; choose "
                                  f"one of {', '.join(self.model.submodels)}")
        if request.max_new_tokens < 1:
            raise RemoteError("max_new_tokens must be at least 1")
        self.cont = cont = request.continued  # Continue: the cut reply goes on (continuation.py)
        think = request.think_submodel if request.thinking_budget != 0 else None
        self.max_new = request.max_new_tokens
        budget = ThinkingBudget.for_reply(request.thinking_budget, request.max_new_tokens)
        if cont is not None:
            why = continue_refusal(engine.kind, self.model.mode, cont)
            if why:
                raise RemoteError(why)
            think = request.think_submodel if cont.thinks_on else None
            if cont.thinks_on:  # the thought goes on within its budget, not a small limit's (reply_record.py)
                budget, self.max_new = ThinkingBudget.for_continued_thought(
                    request.thinking_budget, cut_thought_tokens(cont), request.max_new_tokens)
        # The reply's record, kept as generate.py keeps a local one (runtime/reply_record.py).
        self.record = ReplyRecord(think, request.answer_submodel, budget,
                                  answering=bool(cont and cont.answer_text))
        self.finish: str | None = None
        self.final: _Chunk | None = None  # the current stream's chunk that said how it ended

    # What the record says now: the phase, the submodel at work, and who thinks.
    phase = property(lambda self: self.record.phase)
    current = property(lambda self: self.record.current)
    think_sub = property(lambda self: self.record.think_sub)

    # ------------------------------------------------------------------ the run

    def run(self) -> Iterator[Event]:
        self.record.start()
        error = None
        try:
            mode = self.model.mode
            yield from (self._elastic() if mode == ELASTIC else self._pairs() if mode == PAIRS else self._single())
        except RemoteStopped:
            self.finish = STOPPED
        except RemoteDropped as e:  # said of the part it cut: a drop while the model thought is mid-thought
            self.finish, error = ERROR, str(e.during("thought" if self.phase == THINKING else "answer"))
        except ElasticError as e:
            self.finish, error = ERROR, str(e)
        except Exception as e:  # the reply fails, the app does not
            log.exception("remote reply failed")
            self.finish, error = ERROR, f"{type(e).__name__}: {e}"
        if self.controls.stop_requested and self.finish == ERROR:
            self.finish, error = STOPPED, None  # the stop shut the socket: not the server's fault
        yield self.record.done(self.finish, error)

    def _stop(self) -> bool:
        return self.controls.stop_requested

    def _chunks(self, body: dict) -> Iterator[_Chunk]:
        """The stream's chunks, checked; the last that carried a finish reason is kept (`_final`). A server
        that goes on past the body's max_tokens is hung up on, and the stream ends as an honest one would."""
        self.final = None
        tokens = 0
        stream = self.server.stream("/chat/completions", body, self._stop)
        try:
            for data in stream:
                if self.controls.stop_requested:
                    raise RemoteStopped("stopped")
                chunk = _Chunk(data, self.server.address)
                tokens += chunk.token
                if tokens > body["max_tokens"]:
                    chunk = _Chunk.cut_at_length()
                if chunk.finish is not None:
                    self.final = chunk
                yield chunk
                if chunk.finish == "length" and tokens > body["max_tokens"]:
                    return
        finally:
            stream.close()  # hangs up: the server stops generating

    def _final(self, what: str) -> _Chunk:
        """The chunk that said how the stream ended; a stream that never said was cut short."""
        if self.final is None:
            raise self._cut(what)
        return self.final

    def _body(self, model_id: str, messages: list[dict], max_tokens: int) -> dict:
        s = self.req.sampling
        body = {"model": model_id, "messages": messages, "stream": True, "max_tokens": max_tokens,
                "temperature": s.temperature, "top_p": s.top_p}
        if s.top_k:
            body["top_k"] = s.top_k
        if s.min_p:
            body["min_p"] = s.min_p
        if s.seed is not None:
            body["seed"] = s.seed
        if self.req.stop_strings:
            body["stop"] = list(self.req.stop_strings)
        return body

    def _messages(self) -> list[dict]:
        return [{k: m[k] for k in MESSAGE_KEYS if k in m} for m in self.req.messages]

    def _cut(self, what: str) -> RemoteError:
        return RemoteError(f"the server at {self.server.address} ended the stream before the {what} ended; the "
                           "reply was cut there")

    # ------------------------------------------------------------------ ELASTIC: the server does it all

    def _elastic(self) -> Iterator[Event]:
        req = self.req
        if req.escalation is not None:  # Auto: the server's own Auto level, with this budget
            auto = next(level.name for level in self.engine.depth_levels() if level.escalation)
            elastic = {"depth": auto, "thinking_budget": req.thinking_budget}
        else:
            budget = 0 if self.think_sub is None else (req.thinking_budget if req.thinking_budget is not None
                                                       else self.engine.max_context)  # unbounded: the context
            elastic = {"answer_submodel": req.answer_submodel, "thinking_budget": budget}
            if self.think_sub is not None:
                elastic["think_submodel"] = self.think_sub
        elastic["keep_reasoning"] = not req.truncate_history_thinking
        body = {**self._body(self.model.id, self._messages(), self.max_new), "elastic": elastic}
        for chunk in self._chunks(body):
            switch = chunk.elastic.get("switch") if chunk.finish is None else None
            if switch is not None and chunk.any:
                yield self._told_switch(switch)
            for phase, text in chunk.texts:
                if phase != self.phase:
                    self.record.phase = phase  # (the server's own words: its phases are its record's)
                yield self._token(text)
        final = self._final("reply")
        info, record = final.elastic, self.record
        think = info.get("think_submodel", record.think_sub)
        record.think_sub = think if think in self.model.submodels else None
        record.budget_hit = info.get("budget_hit") is True
        ended = info.get("thinking_end")
        answered = record.tally.counts[ANSWER]
        record.thinking_end = ended if ended in THINKING_ENDS else (ENDED_BY_MODEL if answered else "")
        said = info.get("finish_reason")
        self.finish = said if said in ENGINE_FINISH else FINISH.get(final.finish, END_OF_TURN)

    def _told_switch(self, data) -> Switch:
        """The server's switch (Switch.to_dict, events.py reads it back), checked, as this reply's event."""
        told = Switch.from_dict(data)
        if told is None or not {told.from_submodel, told.to_submodel} <= set(self.model.submodels):
            raise RemoteError(f"the server at {self.server.address} told a switch this program cannot read")
        return self.record.switch(told.to_submodel, told.reprefill_tokens, told.ms, reason=told.reason)

    # ------------------------------------------------------------------ SINGLE: one model, the server's budget

    def _single(self) -> Iterator[Event]:
        cont, kind = self.cont, self.engine.kind
        messages = self._messages() + ([cut_turn(cont.thinking_text, cont.answer_text)] if cont else [])
        body = self._body(self.model.id, messages, self.max_new)
        thinking = self.think_sub is not None
        body["chat_template_kwargs"] = {"enable_thinking": thinking or bool(cont and cont.thinking_text)}
        if cont:
            body.update(kind.continue_thought if thinking else kind.continue_answer)
        echo = bool(cont and cont.thinking_text and not cont.answer_text)  # the answer right after the thought
        budget = self.record.budget.tokens  # (a continued thought's: what is left of it)
        if thinking:
            if budget is not None:
                body.update({name: budget for name in kind.budget_fields})
            effort = self._effort()
            if effort in ("low", "medium", "high"):
                body["reasoning_effort"] = effort
        for chunk in self._chunks(body):
            for phase, text in chunk.texts:
                if text and phase != self.phase:
                    if phase == THINKING:  # a thought after the answer began: not a reply this program shows
                        raise RemoteError(f"the server at {self.server.address} sent reasoning after the answer")
                    self.record.answer()
                    self.record.thinking_end = "model" if thinking else ""
                if phase == ANSWER and echo and text:
                    text, echo = text.removeprefix(THINK_CLOSE), False  # llama.cpp echoes a thought's close
                if text:
                    yield self._token(text)
        self.finish = FINISH.get(self._final("reply").finish, END_OF_TURN)
        thought = self.record.tally.counts[THINKING]
        if thinking and budget is not None and thought >= budget:
            self.record.budget_hit, self.record.thinking_end = True, "budget"  # the server's budget ended it

    def _effort(self) -> str | None:
        """The `reasoning_effort` name of the level this request is, if it is one."""
        by_level = {level: effort for effort, level in effort_levels().items()}
        for level in self.engine.depth_levels():
            if (level.think, level.budget) == (self.think_sub, self.req.thinking_budget):
                return by_level.get(level.name)
        return None

    # ------------------------------------------------------------------ PAIRS: think on one, continue on another

    def _pairs(self) -> Iterator[Event]:
        req, cont = self.req, self.cont
        messages = self._messages()
        thought, answer = (cont.thinking_text, cont.answer_text) if cont else ("", "")
        if self.think_sub is not None:
            yield from self._think(messages + ([cut_turn(thought, "")] if cont else []))
            if self.finish is not None:
                return
            # the thought without the line end that closed it: templates and servers put their own line
            # break before </think> (a second one made llama.cpp's answerer write </think> again)
            thought = (thought + self.record.thought).removesuffix("\n")
        thought_given = self.think_sub is not None or bool(thought)  # a closed thought, the answer after it
        prefilled = thought_given or cont is not None  # the answer goes on from a final assistant turn
        if prefilled:
            turn = cut_turn(thought, answer)
            messages = messages + [{**turn, "reasoning_content": thought} if thought_given else turn]
        left = self.max_new - self.record.tally.counts[THINKING]
        body = self._body(self.model.model_id(req.answer_submodel), messages, max(1, left))
        body["chat_template_kwargs"] = {"enable_thinking": thought_given}
        if prefilled:
            body.update(self.engine.kind.continue_answer)
        self.record.answer()
        asked, seen = time.perf_counter(), 0
        for chunk in self._chunks(body):
            for phase, text in chunk.texts:
                if phase == THINKING and text:
                    raise RemoteError(f"the server at {self.server.address} ({self.engine.kind.name}) thought again "
                                      "instead of answering after the closed thought it was given; two-model "
                                      "depth needs a server that continues a final assistant turn "
                                      "(continue_final_message: vLLM, SGLang, llama.cpp)")
                if phase == ANSWER and not seen and thought_given and not answer:
                    text = text.removeprefix(THINK_CLOSE)  # llama.cpp echoes the close of the thought it was given
                if phase == ANSWER and text:
                    if not seen and req.answer_submodel != self.current:
                        thought_tokens = self.record.tally.counts[THINKING]
                        yield self.record.switch(req.answer_submodel, thought_tokens,
                                                 (time.perf_counter() - asked) * 1000)
                    seen += 1
                    yield self._token(text)
        self.finish = FINISH.get(self._final("answer").finish, END_OF_TURN)

    def _think(self, messages: list[dict]) -> Iterator[Event]:
        """The thinker's thought, ended by the budget rule (reply_record.py), the user, or the model itself."""
        record = self.record
        if not record.budget.fits:  # too few tokens to think and still answer (as a local reply decides)
            record.think_no_more()
            return
        body = self._body(self.model.model_id(self.think_sub), messages, self.max_new)
        body["chat_template_kwargs"] = {"enable_thinking": True}
        if self.cont is not None:  # the cut thought, the final turn, goes on (continuation.py)
            body.update(self.engine.kind.continue_thought)
        chunks = self._chunks(body)
        try:
            for chunk in chunks:
                for phase, text in chunk.texts:
                    if phase == ANSWER and text:  # the model closed its thought itself
                        record.thinking_end = "model"
                        return (yield from self._close_thought())
                    if phase == THINKING and text:
                        yield self._token(text)
                        if record.budget.ends(record.tally.counts[THINKING], text):
                            record.budget_hit, record.thinking_end = True, "budget"
                            return (yield from self._close_thought())
                if self.controls.take_thinking_request().answer_now:
                    record.thinking_end = "user"
                    return (yield from self._close_thought())
                if chunk.finish is not None:
                    record.thinking_end = "model"
                    return (yield from self._close_thought())
            raise self._cut("thought")
        finally:
            chunks.close()  # hangs up: the thinker's server stops generating

    def _close_thought(self) -> Iterator[Event]:
        """The thought ends on a line of its own, as a local one ends it."""
        if not ((self.cont.thinking_text if self.cont else "") + self.record.thought).endswith("\n"):
            yield self._token("\n", forced=True)

    def _token(self, text: str, forced: bool = False) -> Token:
        """A streamed chunk's text as one token (a forced one: the line break that ends a thought)."""
        record = self.record
        latency = 0.0 if forced else record.arrived()
        record.count()
        return record.token(text, None, latency, forced)
