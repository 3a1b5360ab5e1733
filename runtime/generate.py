"""Chat generation with elastic budget control, in three layers (each thin over the one below):

1. `sampled_steps` yields sampled token ids from one submodel, feeding each back (and, when
                   watched, each token's Auto signals, read in the same sync); `decode_steps`
                   the ids alone.
2. `stream_chat`   yields immutable events for a whole reply: it thinks on one submodel
                   under a token budget (an Auto reply climbs to larger ones when the thinker
                   struggles), forces the end of thinking, switches to the answering submodel
                   (which re-prefills the context it has not seen) and answers. The CLI, the
                   GUI and the server use this layer. Each event carries the reply's running
                   totals, and each phase's Token texts, joined, are Done's texts (`ReplyRecord.token`
                   is the one place a text is recorded).
3. `chat`          returns the finished reply.

The thinking budget's rule and the reply's record (its totals, texts and Done) are
runtime/reply_record.py's, shared with the remote producer (runtime/remote/reply.py). A natural
`</think>` ends thinking early; budget 0 turns thinking off; None means unbounded.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

import torch

from .auto_depth import SIGNALS, Escalation, Signals, Watch, read_signals, token_signals
from .controls import Controls, StopRequested
from .errors import ElasticError, UsageError, show
from .events import (
    ANSWER,
    END_OF_TURN,
    ERROR,
    LENGTH,
    STOP_STRING,
    STOPPED,
    THINKING,
    TOOL_CALLS,
    Done,
    Event,
    InvalidToolCall,
    Switch,
    ToolCall,
)
from .grammar import Constraint, answer_grammar, check_grammar, largest_call
from .logprobs import TokenLogprob, read_logprobs, token_logprobs
from .native import describe, is_panic
from .options import MAX_NEW_TOKENS
from .reply_record import Continuation, ReplyRecord, ThinkingBudget
from .sampling import DeviceSampler, SamplingSettings
from .tool_calls import CALL_OPEN, Text, ToolCallError, ToolCallStream, opening_held, tool_schemas

if TYPE_CHECKING:  # (engine.py imports this module: its `stream` is `stream_chat`)
    from .engine import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[dict, ...]  # {"role": ..., "content": ...}; assistant turns may carry reasoning_content
    think_submodel: str | None  # None: thinking off
    answer_submodel: str
    thinking_budget: int | None = None  # None: unbounded (within max_new_tokens); 0: thinking off
    max_new_tokens: int = MAX_NEW_TOKENS.default
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    stop_strings: tuple[str, ...] = ()
    truncate_history_thinking: bool = True
    # (context token ids, logits) -> logits, applied in order before sampling
    logits_processors: tuple = ()
    # APPROXIMATE: at the switch, reuse the thinking submodel's state instead of re-prefilling
    transplant: bool = False
    # Auto: thinking climbs to larger submodels when the thinker struggles (DepthLevel.escalation)
    escalation: Escalation | None = None
    # Whose earlier turns this reply may reuse from the engine's cache (Engine.catch_up): "" is the
    # local user (the app's window, the CLI); the server gives each request its own (server/http_app.py)
    cache_scope: str = ""
    # OpenAI-style tools offered ({"type": "function", "function": {name, description, parameters}}),
    # rendered by the template; the answer's calls come as ToolCall events (runtime/tool_calls.py parses)
    tools: tuple[dict, ...] | None = None
    tool_choice: str = "auto"  # TOOL_CHOICES: "none" offers no tool; "required" forces a call (grammar.py)
    tool_name: str | None = None  # the one tool a forced call must call (tool_choice "required")
    parallel_tool_calls: bool = True  # False: the reply ends at its first valid call
    strict_tools: bool = False  # OpenAI's `strict`: with tool_choice "auto", calls are constrained too
    # The JSON schema the answer must follow (grammar.response_format_schema); None: free text
    response_format: dict | None = None
    # Each sampled token's log-probability and that many likeliest alternatives' (0 to 20; logprobs.py),
    # on its Token event; None: none (nothing more is computed)
    logprobs: int | None = None
    # A raw prompt (the server's /v1/completions): encoded as plain text instead of the messages in the
    # chat template, and continued by the answering submodel with no thinking and nothing stripped
    prompt: str | None = None
    # Continue a reply cut off by its token limit: its texts follow the prompt as the model's own, and
    # this reply adds to them (its thought first, when it was cut mid-thought; reply_record.Continuation)
    continued: Continuation | None = None


TOOL_CHOICES = ("auto", "none", "required")


class Step(NamedTuple):
    """One sampled token, with what rode back with it from the device in the same wait."""
    token: int
    signals: Signals | None  # Auto's (auto_depth.py), while watched
    logprobs: tuple[float, ...] | None  # logprobs.token_logprobs' values, when asked for


def sampled_steps(engine: Engine, name: str, logits: torch.Tensor, sample, processors=(), context=(),
                  watch: bool | Callable[[], bool] = False, logprobs: int | None = None) -> Iterator[Step]:
    """Layer 1: from the logits after the cached context, sample a token, run it, yield it, repeat.
    The caller stops when it likes; the last yielded token is already in the cache (its step was
    queued before the host read the token, so the GPU never waits for the host).
    `sample` is a DeviceSampler (the token stays on the device) or any `logits -> int` sampler.
    `processors` see `context`, the caller's live list of the sequence's token ids. With `watch`,
    each token comes with the signals of the distribution it was sampled from (auto_depth.py); with
    `logprobs` (0 to 20 alternatives), with its log-probability and the likeliest tokens' (logprobs.py):
    both computed on the device and read back with it. `watch` may be a function, asked before each
    token (a thought the user moves to Auto starts being watched mid-way)."""
    watching = watch if callable(watch) else (lambda: watch)
    step = engine.decoder(name)
    while True:
        for process in processors:
            logits = process(context, logits)
        signals = token_signals(logits) if watching() else None
        if isinstance(sample, DeviceSampler):
            token = sample.on_device(logits)
            logits = step.send(token, _riders(signals, logits, token, logprobs))
            yield _step(step.receive(), step.signals, signals is not None)
        else:
            token = sample(logits)
            riders = _riders(signals, logits, torch.tensor([token], device=logits.device), logprobs)
            logits = step.forward_token(token)
            yield _step(token, None if riders is None else riders.tolist(), signals is not None)


def _riders(signals: torch.Tensor | None, logits: torch.Tensor, token: torch.Tensor, logprobs: int | None):
    """What rides back with the token: Auto's signals, then its log-probabilities (one device vector)."""
    values = [v for v in (signals, None if logprobs is None else token_logprobs(logits, token, logprobs))
              if v is not None]
    return torch.cat(values) if len(values) > 1 else (values[0] if values else None)


def _step(token: int, values, watched: bool) -> Step:
    if values is None:
        return Step(token, None, None)
    cut = len(SIGNALS) if watched else 0
    return Step(token, read_signals(values[:cut]) if watched else None, tuple(values[cut:]) or None)


def decode_steps(engine: Engine, name: str, logits: torch.Tensor, sample, processors=(), context=()) -> Iterator[int]:
    """Layer 1, the token ids alone."""
    for token, *_ in sampled_steps(engine, name, logits, sample, processors, context):
        yield token


def stream_chat(engine: Engine, request: ChatRequest, controls: Controls | None = None) -> Iterator[Event]:
    """Layer 2: one reply as events: Prefill, Token..., [Switch, Token...], Done (always last)."""
    return _Reply(engine, request, controls or Controls()).run()


def chat(engine: Engine, request: ChatRequest, controls: Controls | None = None) -> Done:
    """Layer 3: the finished reply (its Done event carries the texts and counts)."""
    done = None
    for event in stream_chat(engine, request, controls):
        done = event
    return done


class _Reply:
    """State of one reply while it streams. `run` reads top to bottom: prefill, then one token
    per loop, with the phase change and the switch in between."""

    def __init__(self, engine: Engine, request: ChatRequest, controls: Controls):
        self.engine, self.req, self.controls = engine, request, controls
        self.chat = engine.chat
        self.special = engine.chat.special
        if request.max_new_tokens < 1:
            raise UsageError("max_new_tokens must be at least 1")
        self.tools = _offered_tools(request)
        ladder = request.escalation.ladder if request.escalation else ()
        for name in filter(None, (request.think_submodel, request.answer_submodel, *ladder)):
            engine.model.submodel(name)  # raises a clear error for an unknown or unloaded submodel
        if request.prompt is not None and request.think_submodel is not None:
            raise UsageError("a raw prompt is continued without thinking; leave think_submodel out")
        thinking = (request.think_submodel is not None and request.thinking_budget != 0
                    and self.chat.supports_thinking)
        cont = request.continued
        if cont is not None:  # the cut reply decides: it thought or it did not, and it may think on
            self._check_continued(cont)
            thinking = cont.thinks_on
        self.prompt = self._prompt(thinking)
        room = engine.max_context - len(self.prompt)
        if room < 2:
            raise UsageError(f"the conversation ({len(self.prompt)} tokens) fills the context "
                             f"({engine.max_context}); start a new chat or raise the context length")
        self.max_new = min(request.max_new_tokens, room)  # every token of the reply, forced ones included
        budget = ThinkingBudget.for_reply(request.thinking_budget if thinking else 0, self.max_new)
        if cont is not None and cont.thinks_on:  # the thought goes on within its budget, not a small limit's
            thought = (cont.thinking_tokens if cont.thinking_tokens is not None
                       else len(self.chat.encode_plain(cont.thinking_text)))
            budget, limit = ThinkingBudget.for_continued_thought(request.thinking_budget, thought,
                                                                 request.max_new_tokens)
            self.max_new = min(limit, room)
        if thinking and not budget.fits and cont is None:  # too few tokens to think and still answer
            thinking, budget = False, budget.to(0)
            self.prompt = self._prompt(False)
        # The reply's record: what every event reports and what Done says (runtime/reply_record.py).
        self.record = ReplyRecord(request.think_submodel if thinking else None, request.answer_submodel, budget,
                                  # (a raw prompt's line breaks are its own, and so are an answer's continued)
                                  answering=request.prompt is not None or bool(cont and cont.answer_text))
        # Auto: the thinker is watched while there is a larger submodel to climb to.
        self.escalation = request.escalation if thinking else None
        self.watch = Watch(self.escalation.policy) if self.escalation else None
        self.boundary = _last_index(self.prompt, self.special.turn_start)
        self.sample = DeviceSampler(request.sampling, engine.model.device)
        # Constrained decoding (a forced call, a response format): the answer only, never the thinking.
        # The grammar is checked now; it is built when the answer starts, knowing the room it has left.
        grammar = self._grammar(self.max_new)
        self.constrained, self.constraint = grammar is not None, None

        self.context = list(self.prompt)
        self.finish: str | None = None
        self.decoder = self.chat.stream_decoder()
        self.held = ""  # answer text held back while it could be the start of a stop string
        # Tool calls: the answer's raw text goes through the parser, which keeps calls out of the Tokens.
        self.tool_stream = ToolCallStream(list(self.tools)) if self.tools else None
        self.think_held = ""  # thinking text held back while it could be the start of <tool_call>
        self.carried = ""  # raw answer text not yet parsed (a call that began inside the thinking)
        self.logprob: TokenLogprob | None = None  # the last sampled token's (request.logprobs)
        if self.phase == ANSWER:
            self._constrain()
        else:
            check_grammar(grammar)  # a bad grammar fails the request now, not when the answer starts

    # What the record says now: the phase, and the submodel at work.
    phase = property(lambda self: self.record.phase)
    current = property(lambda self: self.record.current)

    def _grammar(self, room: int) -> str | None:
        r = self.req
        return answer_grammar(self.chat, self.tools, r.tool_choice, r.tool_name, r.parallel_tool_calls,
                              r.response_format, room, r.strict_tools)

    def _constrain(self) -> None:
        """The answer starts here: from its first token, it follows the grammar (if any), whose text
        values may use the room the reply has left."""
        if not self.constrained:
            return
        room = self.max_new - self.record.tally.tokens
        self.call_size = largest_call(self.tools, self.req.tool_name, self.req.parallel_tool_calls, room)
        self.constraint = Constraint(self.chat, self._grammar(room), self.engine.model.config.vocab_size,
                                     self.engine.model.device)
        self.constraint.start(len(self.context))

    def _prompt(self, thinking: bool) -> list[int]:
        if self.req.prompt is not None:
            return self.chat.encode_plain(self.req.prompt)
        cont = self.req.continued
        opened = thinking or bool(cont and cont.thinking_text)  # the template opens a thought to write into
        ids = self.chat.prompt_ids(list(self.req.messages), enable_thinking=opened,
                                   truncate_history_thinking=self.req.truncate_history_thinking,
                                   tools=list(self.tools) if self.tools else None)
        return ids + (self._continued_ids(cont) if cont else [])

    def _continued_ids(self, cont: Continuation) -> list[int]:
        """The cut reply's tokens as the model wrote them: its thought, then (if the thought ended) the
        `</think>` and the line break the model writes after it (the answer's text drops that break), then
        its answer. The texts are the model's own output, so each encodes back to the tokens it sampled."""
        ids = self.chat.encode_plain(cont.thinking_text) if cont.thinking_text else []
        if cont.thinking_text and cont.thinking_done:
            ids += [self.special.think_end] + (self.chat.encode("\n") if cont.answer_text else [])
        return ids + (self.chat.encode_plain(cont.answer_text) if cont.answer_text else [])

    def _check_continued(self, cont: Continuation) -> None:
        if self.req.prompt is not None:
            raise UsageError("a raw prompt is continued by sending it longer; leave `continued` out")
        if cont.thinking_text and not self.chat.supports_thinking:
            raise UsageError("this model does not think, so a thought cannot be continued")
        if cont.thinks_on and self.req.think_submodel is None:
            raise UsageError("the reply was cut mid-thought: name the submodel that thinks on (think_submodel)")
        if self.req.response_format is not None or self.req.tool_choice == "required":
            raise UsageError("a reply held to a format or a forced tool call cannot be continued; ask again")

    # ------------------------------------------------------------------ the loop

    def run(self) -> Iterator[Event]:
        self.record.start()
        error = None
        try:
            prefill, logits = self.engine.catch_up(self.current, self.context, self.boundary, self.controls,
                                                   self.req.cache_scope)
            yield replace(prefill, progress=self.record.progress())
            self.steps = self._steps(self.current, logits)
            while self.finish is None:
                if self.controls.stop_requested:
                    self.finish = STOPPED
                    break
                steer = self.controls.take_thinking_request()
                if self.phase == THINKING and not steer.empty:
                    yield from self._steer(steer)
                wanted = self.controls.take_submodel_request()
                if wanted and wanted != self.current and wanted in self.engine.model.views:
                    self.watch = None  # a submodel the user chose: Auto stops climbing
                    yield self._switch(wanted, reason="request")
                token, signals, logprobs = next(self.steps)
                if self.phase == THINKING and self.watch is not None and self.watch.struggling(signals):
                    yield self._escalate()  # the token is not kept: the submodel above decides it
                    continue
                latency = self.record.arrived()
                self.logprob = None if logprobs is None else read_logprobs(logprobs, token, self._piece)
                if self.phase == THINKING:
                    yield from self._thinking_token(token, latency)
                else:
                    yield from self._answer_token(token, latency)
                if self.finish is None and self.record.tally.tokens >= self.max_new:
                    self.finish = LENGTH
        except StopRequested:
            self.finish = STOPPED
        except ElasticError as e:
            self.finish, error = ERROR, str(e)
        except Exception as e:  # the reply fails, the app does not: report and carry on
            log.exception("generation failed")
            self.finish, error = ERROR, f"{type(e).__name__}: {e}"
        except BaseException as e:  # a native library's panic (runtime/native.py): the same, not a dead thread
            if not is_panic(e):
                raise
            log.exception("generation failed")
            self.finish, error = ERROR, describe(e)
        yield from self._release()
        yield self.record.done(self.finish, error)

    def _steps(self, name: str, logits):
        processors = tuple(self.req.logits_processors) + ((self.constraint,) if self.constraint else ())
        return sampled_steps(self.engine, name, logits, self.sample, processors, self.context, self._watching,
                             self.req.logprobs)

    def _piece(self, token: int) -> str:
        """A token's own text, special tokens included (a log-probability's `token`)."""
        return self.chat.tokenizer.decode([token], skip_special_tokens=False)

    def _watching(self) -> bool:
        """Signals are computed only while they can matter: an Auto thought with somewhere to climb."""
        return (self.phase == THINKING and self.watch is not None
                and self.escalation.next_rung(self.current) is not None)

    def _count(self, token: int) -> None:
        """One more token of the current phase, produced by the current submodel, in the context."""
        self.record.count()
        self.context.append(token)

    # ------------------------------------------------------------------ thinking

    def _thinking_token(self, token: int, latency: float) -> Iterator[Event]:
        """Handles a token sampled while thinking; ends the phase when the model or the budget says so."""
        record = self.record
        if token in self.special.end_of_turn:
            # The model tried to end the turn inside its thinking: never leave a reply with no answer.
            record.thinking_end = "model"
            yield from self._start_answer(self._end_thinking_tokens())
            return
        if token == self.special.think_end:  # the model ended its thinking itself
            record.thinking_end = "model"
            yield from self._start_answer([token], latency, forced=False)
            return
        text = self.decoder.push(token)
        self._count(token)
        if self.tool_stream is not None:
            text, self.think_held = self.think_held + text, ""
            if CALL_OPEN in text:  # a call that starts inside the thinking ends it (as the real model does)
                at = text.index(CALL_OPEN)
                record.thinking_end = "tool_call"
                yield record.token(text[:at], token, latency, logprob=self.logprob)
                if self.constrained:  # the grammar writes the call from the answer's start
                    yield from self._start_answer(self._end_thinking_tokens())
                else:  # the call goes on in the answer
                    self.carried = text[at:]
                    yield from self._start_answer([])
                return
            keep = opening_held(text)
            text, self.think_held = text[:len(text) - keep], text[len(text) - keep:]
        yield record.token(text, token, latency, logprob=self.logprob)
        if record.budget.ends(record.tally.counts[THINKING], text):
            record.budget_hit, record.thinking_end = True, "budget"
            yield from self._start_answer(self._end_thinking_tokens())

    def _escalate(self) -> Switch:
        """Auto: the thinker struggles, so the next submodel up re-prefills the thought so far, decides
        the token the thinker was unsure of, and thinks on (watched afresh while it can climb further)."""
        self.watch = Watch(self.escalation.policy)
        return self._switch(self.escalation.next_rung(self.current), reason="escalate")

    def _steer(self, steer) -> Iterator[Event]:
        """Applies what the user asked of the thought in flight (controls.Controls), before the next token.
        A fixed depth stops Auto's climbing; a move to Auto starts it (from its thinker, watched afresh)."""
        record = self.record
        if steer.answer_now:
            record.thinking_end = "user"
            yield from self._start_answer(self._end_thinking_tokens())
            return
        target = steer.think_submodel
        if target:
            self.escalation = steer.escalation
            self.watch = Watch(steer.escalation.policy) if steer.escalation else None
        if target and target != self.current and target in self.engine.model.views:
            yield self._switch(target, reason="depth")
        if steer.budget is not None:
            record.budget = record.budget.to(steer.budget)
        if steer.more:
            record.budget = record.budget.longer(steer.more, record.tally.counts[THINKING])

    def _end_thinking_tokens(self) -> list[int]:
        """`</think>`, on a line of its own."""
        cont = self.req.continued
        ends_line = ((cont.thinking_text if cont else "") + self.record.thought).endswith("\n")
        return ([] if ends_line else self.chat.encode("\n")) + [self.special.think_end]

    def _start_answer(self, closing: list[int], latency: float = 0.0, forced: bool = True) -> Iterator[Event]:
        """Ends the thinking phase with `closing` (forced tokens, or the model's own `</think>`), whose
        first Token also carries the thinking text held back and whose last one what the thinking
        decoder still held, then switches to the answering submodel. No `closing` (a tool call began
        inside the thinking): the call's text so far and the decoder's are carried into the answer."""
        for i, t in enumerate(closing):
            text = ((self.think_held if i == 0 else "") + self.decoder.push(t)
                    + (self.decoder.flush() if i == len(closing) - 1 else ""))
            self._count(t)
            yield self.record.token(text, t, 0.0 if forced else latency, forced, None if forced else self.logprob)
        if not closing:
            self.carried += self.decoder.flush()
        self.think_held = ""
        self.record.answer()
        self.decoder = self.chat.stream_decoder()
        self._constrain()
        target = self.req.answer_submodel
        if target != self.current:
            yield self._switch(target, approximate=self.req.transplant)
        elif closing:  # same submodel: it only runs the forced tokens and the last sampled one
            _, logits = self.engine.catch_up(self.current, self.context, None, self.controls, self.req.cache_scope)
            self.steps = self._steps(self.current, logits)
        # (no closing on the same submodel: its steps already hold the logits after the last token)

    def _switch(self, target: str, approximate: bool = False, reason: str = "answer") -> Switch:
        """The answering (or requested) submodel catches up on the context it has not seen: exactly by
        re-prefilling it, or (opt-in) approximately by taking over the thinking submodel's state."""
        if approximate:
            prefill, logits = self.engine.transplant(self.current, target, self.context, len(self.prompt),
                                                     self.controls, self.req.cache_scope)
        else:
            prefill, logits = self.engine.catch_up(target, self.context, self.boundary, self.controls,
                                                   self.req.cache_scope)
        event = self.record.switch(target, prefill.prefilled_tokens, prefill.ms, not approximate, reason)
        self.steps = self._steps(target, logits)
        return event

    # ------------------------------------------------------------------ answering

    def _answer_token(self, token: int, latency: float) -> Iterator[Event]:
        if token in self.special.end_of_turn:
            self.finish = END_OF_TURN
            return
        raw = self.decoder.push(token)
        self._count(token)
        text, calls = self._parse(raw, final=False)
        text, self.held = self.held + text, ""
        for stop in self.req.stop_strings:
            if stop and stop in text:
                text, self.finish = text[:text.index(stop)], STOP_STRING
        if self.finish is None:
            text, self.held = _hold_back(text, self.req.stop_strings)
        if self.finish is None and self.record.tally.tokens >= self.max_new:
            self.finish = LENGTH
            tail, more = self._tail()  # the reply's last token carries what was still held back
            text, calls = text + tail, calls + more
        yield self.record.token(text, token, latency, logprob=self.logprob)
        yield from self._call_events(calls)

    def _parse(self, raw: str, final: bool) -> tuple[str, list]:
        """Raw answer text -> the content to show and the calls it completed (parser events). Without
        tools, the text itself; `final` closes the parser (an open call is reported cut off)."""
        if self.tool_stream is None:
            return raw, []
        raw, self.carried = self.carried + raw, ""
        parsed = self.tool_stream.feed(raw)
        if final:
            parsed += self.tool_stream.close()
            self.tool_stream = None
        return "".join(e.text for e in parsed if isinstance(e, Text)), [e for e in parsed if not isinstance(e, Text)]

    def _call_events(self, parsed: list) -> Iterator[ToolCall | InvalidToolCall]:
        """The parser's calls as events, numbered and recorded; a valid call ends the reply when the
        request allows one call only."""
        record = self.record
        for p in parsed:
            if isinstance(p, Text):
                continue
            if isinstance(p, ToolCallError):
                yield record.call(InvalidToolCall(p.reason, p.text, p.name, p.arguments, len(record.invalid_calls),
                                                  record.progress()))
                continue
            event = record.call(ToolCall(f"call_{uuid.uuid4().hex[:24]}", p.name, p.arguments, len(record.calls),
                                         record.progress()))
            room = self.max_new - record.tally.tokens
            one_only = not self.req.parallel_tool_calls
            if self.finish is None and (one_only or (self.constraint is not None and room < self.call_size)):
                self.finish = TOOL_CALLS  # (constrained: another call might not finish in the room left)
            yield event

    # ------------------------------------------------------------------ the end

    def _tail(self, whole: bool = True) -> tuple[str, list]:
        """The text still held back, taken once: the start of a stop string that never came and (`whole`)
        the decoder's last bytes, with the calls the parser completes on closing (or reports cut off)."""
        text, calls = self._parse(self.decoder.flush() if whole else "", final=True)
        text, self.held, self.decoder = self.held + text, "", self.chat.stream_decoder()
        return text, calls

    def _release(self) -> Iterator[Event]:
        """A reply that ended on no token of its own releases what was still held back as one Token of no
        new token: after a stop string, nothing; after a stop or an error, not the bytes of a character
        the cut split (they were never text). A call still open is reported cut off."""
        if self.finish == STOP_STRING:
            _, calls = self._parse("", final=True)
            yield from self._call_events(calls)
            return
        text, calls = self._tail(whole=self.finish not in (STOPPED, ERROR))
        if text and (token := self.record.token(text, None)).text:  # (line breaks alone before the answer are dropped)
            yield token
        yield from self._call_events(calls)


def _offered_tools(request: ChatRequest) -> tuple[dict, ...] | None:
    """The tools the template renders and the parser checks calls against: none for tool_choice
    "none"; a forced tool must be among them."""
    if request.tool_choice not in TOOL_CHOICES:
        raise UsageError(f"tool_choice must be one of {', '.join(TOOL_CHOICES)}, not {show(request.tool_choice, 40)}")
    tools = tuple(request.tools or ())
    if request.tool_choice == "none" or not tools:
        if request.tool_choice == "required" or request.tool_name:
            raise UsageError("a tool call is required but no tool is offered")
        return None
    names = tool_schemas(tools)
    if len(names) != len(tools):
        raise UsageError("every tool needs a function name, each a different one")
    if request.tool_name is not None and request.tool_name not in names:
        raise UsageError(f"the forced tool {show(request.tool_name, 40)} is not offered "
                         f"(offered: {', '.join(sorted(names))[:200]})")
    return tools


def _last_index(ids: list[int], token: int | None) -> int | None:
    if token is None or token not in ids:
        return None
    return len(ids) - 1 - ids[::-1].index(token)


def _hold_back(text: str, stops: tuple[str, ...]) -> tuple[str, str]:
    """Splits off the longest tail of `text` that is the start of a stop string."""
    keep = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:n]):
                keep = max(keep, n)
                break
    return (text[:-keep], text[-keep:]) if keep else (text, "")
