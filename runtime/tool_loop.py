"""The tool loop: a reply that calls tools, with the user's consent for every call.

    stream = lambda request, controls: stream_chat(engine, request, controls)  # or stream_in_turn (the app)
    for event in run_tool_loop(stream, request, toolbox, consent, controls):
        ...  # the rounds' Prefill/Token/Switch/ToolCall events, a ToolResult per call, a ToolRound
             # after each round that called tools, and one Done (always last)

One round is one reply of `stream` (generate.stream_chat, or engine_queue.stream_in_turn, which takes a
turn on the engine per round, so others may use it while a call waits for consent) with the tools
offered. When it ends having made calls, each call is put to `consent` (unless the tool is allowed
already: always, or in this chat; a consent covers one tool of one server as both were defined when it
was given, see `consent_key`), run through the
`toolbox` (runtime/mcp/client.py's McpManager, or anything with its `tool` and `call`) and its result
becomes a `tool` message after the round's assistant turn (runtime/tool_calls.py's messages, which the
template renders); then the model goes on in the next round. A declined call goes back to the model as
a declined result, a malformed one as its error, so the model can answer or try again.

Calls are constrained: every round's answer follows the offered tools' schemas once it opens a call
(grammar.constrainable; OpenAI's `strict` with tool_choice "auto"), so what the model starts as a call
is a call that can run; a tool whose schema the grammar cannot honour leaves them free.

Bounded: at most `max_calls` calls are run in one reply (options.MAX_TOOL_CALLS); calls past it come
back as "not run" (the model is told to answer with what it has), and a model that calls again after
that ends the reply (finish_reason TOOL_LIMIT). The same `controls` steer every
round, so Stop works at every point (a round, the consent, the call: the call is abandoned) and the
depth slider, Answer now and Think longer act as in any reply. Thinking between calls counts against
the thinking budget (each round gets what the earlier ones left) and every token against
`max_new_tokens`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Protocol

from .controls import Controls
from .events import END_OF_TURN, LENGTH, STOPPED, TOOL_CALLS, Done, Event, InvalidToolCall, ToolCall
from .generate import ChatRequest
from .grammar import constrainable
from .options import MAX_TOOL_CALLS
from .tool_calls import tool_message

ALLOW_ONCE, ALLOW_IN_CHAT, DECLINE = "once", "chat", "decline"  # what `consent` answers
TOOL_LIMIT = "tool_limit"  # the loop's finish_reason when the model kept calling past the limit
# ToolResult.status
OK, FAILED, DECLINED, STOPPED_CALL, NOT_RUN, INVALID = "ok", "error", "declined", "stopped", "limit", "invalid"


@dataclass(frozen=True)
class PendingCall:
    """A call waiting for the user's consent: what the dialog shows."""
    id: str
    name: str
    server: str  # the MCP server that offers the tool ("" when none does)
    arguments: dict
    description: str = ""


@dataclass(frozen=True)
class ToolResult:
    """A call's outcome, as the model reads it (`content`) and as the reply shows and saves it."""
    id: str
    name: str
    server: str
    arguments: dict
    content: str
    is_error: bool
    status: str  # OK, FAILED, DECLINED, STOPPED_CALL, NOT_RUN or INVALID
    ms: float = 0.0
    truncated: bool = False
    type: str = "tool_result"

    def to_dict(self) -> dict:
        return {"type": self.type, "id": self.id, "name": self.name, "server": self.server,
                "arguments": self.arguments, "content": self.content, "is_error": self.is_error,
                "status": self.status, "ms": self.ms, "truncated": self.truncated}

    @classmethod
    def from_dict(cls, data: dict) -> ToolResult | None:
        """A saved result (a history's), or None when it is not one this version wrote."""
        try:
            return cls(str(data["id"]), str(data["name"]), str(data.get("server", "")),
                       dict(data.get("arguments") or {}), str(data["content"]), bool(data["is_error"]),
                       str(data["status"]), float(data.get("ms", 0.0)), bool(data.get("truncated", False)))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class ToolRound:
    """A round that made tool calls ended: its texts (the round's Done) and its calls' results, in the
    order they go back to the model. The reply goes on in a next round."""
    done: Done
    results: tuple[ToolResult, ...]
    type: str = "tool_round"

    @property
    def progress(self):
        return self.done.progress

    def to_dict(self) -> dict:
        return {"type": self.type, "thinking": self.done.thinking_text, "answer": self.done.answer_text,
                "calls": [r.to_dict() for r in self.results]}


class Toolbox(Protocol):
    def tool(self, name: str): ...  # has .server and .description, or None

    def call(self, name: str, arguments: dict, cancelled: Callable[[], bool] = ..., timeout_s: float | None = ...): ...


def consent_key(tool) -> tuple | None:
    """What a consent covers: one tool of one server, as both were defined when it was given: the server's
    name and the fingerprint of its approved command (McpTool.origin), the tool's name, and a digest of its
    description and schema (McpTool.definition). Keyed on the bare name, a tool allowed for one server ran
    unasked when another server offered a tool of that name (issue 37); a changed definition asks again.
    None (always ask) when no server offers the tool."""
    if tool is None:
        return None
    return (str(tool.server), str(getattr(tool, "origin", "")), str(tool.name), str(getattr(tool, "definition", "")))


@dataclass
class ChatTools:
    """A chat's tool state, kept by its owner across replies: the tools allowed without asking in this
    chat ("Always allow this tool in this chat") and those allowed always (the user's settings), each a
    `consent_key`."""
    allowed_in_chat: set[tuple] = field(default_factory=set)
    always_allowed: frozenset[tuple] = frozenset()

    def allowed(self, tool) -> bool:
        key = consent_key(tool)
        return key is not None and (key in self.allowed_in_chat or key in self.always_allowed)


def conversation_after(round_: ToolRound) -> list[dict]:
    """The messages a round adds to the conversation: its assistant turn (its thinking, text and calls;
    a malformed call as the text it wrote) and one `tool` message per result, in order."""
    done = round_.done
    invalid = "".join(c.text for c in done.invalid_tool_calls)
    message = {"role": "assistant", "content": done.answer_text + invalid,
               "tool_calls": [c.as_message_call() for c in done.tool_calls]}
    if done.thinking_text:
        message["reasoning_content"] = done.thinking_text
    return [message, *(tool_message(r.content) for r in round_.results)]


MAX_SAVED_ROUNDS = 256


def saved_rounds(meta: dict) -> list[dict]:
    """A saved reply's rounds (`meta["tool_rounds"]`, outside input: a history file), each checked: its
    texts as text and only the calls that read back as results. [] when there are none."""
    rounds = meta.get("tool_rounds") if isinstance(meta, dict) else None
    out = []
    for r in rounds[:MAX_SAVED_ROUNDS] if isinstance(rounds, list) else []:
        if not isinstance(r, dict):
            continue
        calls = r.get("calls") if isinstance(r.get("calls"), list) else []
        results = [x for x in (ToolResult.from_dict(c) for c in calls if isinstance(c, dict)) if x]
        out.append({"thinking": r.get("thinking") if isinstance(r.get("thinking"), str) else "",
                    "answer": r.get("answer") if isinstance(r.get("answer"), str) else "",
                    "calls": [x.to_dict() for x in results]})
    return out


def replay_messages(saved_rounds: list[dict]) -> list[dict]:
    """The messages of a saved reply's rounds (ToolRound.to_dict), for a conversation sent again: the
    history keeps each round, so an edit or a regenerate gives the model what it saw."""
    out = []
    for r in saved_rounds:
        results = [x for x in (ToolResult.from_dict(c) for c in r.get("calls", []) if isinstance(c, dict)) if x]
        calls = [{"id": x.id, "type": "function", "function": {"name": x.name, "arguments": x.arguments}}
                 for x in results if x.status != INVALID]
        invalid = [x for x in results if x.status == INVALID]
        message = {"role": "assistant", "content": str(r.get("answer", "")), "tool_calls": calls}
        if r.get("thinking"):
            message["reasoning_content"] = str(r["thinking"])
        out += [message, *(tool_message(x.content) for x in results if x.status != INVALID),
                *(tool_message(x.content) for x in invalid)]
    return out


def run_tool_loop(stream: Callable[[ChatRequest, Controls], Iterator[Event]], request: ChatRequest,
                  toolbox: Toolbox, consent: Callable[[PendingCall], str], controls: Controls | None = None,
                  chat_tools: ChatTools | None = None,
                  max_calls: int = MAX_TOOL_CALLS.default, timeout_s: float | None = None,
                  constrain: bool = True) -> Iterator[Event]:
    """A reply with tools; see the module's docstring. `request.tools` are the tools offered;
    `constrain` False leaves calls free (only checked after they are written)."""
    controls = controls or Controls()
    chat_tools = chat_tools if chat_tools is not None else ChatTools()
    messages, made, limit_hit = list(request.messages), 0, False
    if constrain and constrainable(request.tools):
        request = replace(request, strict_tools=True)
    budget, room = request.thinking_budget, request.max_new_tokens
    while True:
        this = replace(request, messages=tuple(messages), thinking_budget=budget, max_new_tokens=room)
        done = None
        for event in stream(this, controls):
            if isinstance(event, Done):
                done = event
            else:
                yield event
        called = done.finish_reason == TOOL_CALLS or (done.finish_reason == END_OF_TURN and done.invalid_tool_calls)
        if not called:
            yield done
            return
        results = []
        for call in [*done.tool_calls, *done.invalid_tool_calls]:
            result = _outcome(call, toolbox, consent, controls, chat_tools, made >= max_calls, max_calls, timeout_s)
            made += result.status not in (NOT_RUN, STOPPED_CALL)
            results.append(result)
            yield result
        round_ = ToolRound(done, tuple(results))
        yield round_
        if controls.stop_requested:
            yield replace(done, finish_reason=STOPPED)
            return
        if any(r.status == NOT_RUN for r in results):
            if limit_hit:  # told it had reached the limit, it called again: the reply ends here
                yield replace(done, finish_reason=TOOL_LIMIT)
                return
            limit_hit = True
        if budget is not None and this.think_submodel is not None and done.thinking_budget is not None:
            budget = max(0, done.thinking_budget - done.progress.thinking_tokens)  # (Think longer's raise kept)
        room -= done.progress.tokens
        if room < 1:
            yield replace(done, finish_reason=LENGTH)
            return
        messages += conversation_after(round_)


def _outcome(call, toolbox, consent, controls: Controls, chat_tools: ChatTools, over: bool, max_calls: int,
             timeout_s) -> ToolResult:
    """One call: not run past the limit or after a Stop, reported when malformed, else asked and run."""
    if isinstance(call, InvalidToolCall):
        return ToolResult(f"invalid_{call.index}", call.name or "", "", call.arguments or {},
                          f"the call could not be run: {call.error}", True, INVALID)
    assert isinstance(call, ToolCall)
    tool = toolbox.tool(call.name)
    server = getattr(tool, "server", "") if tool else ""

    def result(content: str, status: str, is_error: bool = True, **kw) -> ToolResult:
        return ToolResult(call.id, call.name, server, call.arguments, content, is_error, status, **kw)

    if controls.stop_requested:
        return result("not run: the user stopped the reply", STOPPED_CALL)
    if over:
        return result(f"not run: this reply reached its limit of {max_calls} tool calls; answer with what you have",
                      NOT_RUN)
    if not chat_tools.allowed(tool):
        started = time.perf_counter()
        answer = consent(PendingCall(call.id, call.name, server, call.arguments,
                                     getattr(tool, "description", "") if tool else ""))
        if controls.stop_requested:
            return result("not run: the user stopped the reply", STOPPED_CALL)
        if answer == ALLOW_IN_CHAT and consent_key(tool) is not None:
            chat_tools.allowed_in_chat.add(consent_key(tool))
        elif answer != ALLOW_ONCE:
            return result("declined: the user did not allow this call; do not call it again for this request",
                          DECLINED, ms=round((time.perf_counter() - started) * 1000, 1))
    if consent_key(toolbox.tool(call.name)) != consent_key(tool):  # it changed while the user was asked
        return result("not run: the tool changed (its server or its definition) while the user was asked; "
                      "call it again to be asked about the tool as it is now", DECLINED)
    outcome = toolbox.call(call.name, call.arguments, cancelled=lambda: controls.stop_requested, timeout_s=timeout_s)
    status = STOPPED_CALL if outcome.stopped else FAILED if outcome.is_error else OK
    return result(outcome.content, status, outcome.is_error, ms=outcome.ms, truncated=outcome.truncated)


def describe_arguments(arguments: dict, fold: int = 200) -> str:
    """Arguments pretty-printed for a person, each text value longer than `fold` characters folded
    to its start and its length (the dialog and the reply show the whole value on request)."""
    def folded(value):
        if isinstance(value, str) and len(value) > fold:
            return f"{value[:fold]}… ({len(value):,} characters)"
        if isinstance(value, dict):
            return {k: folded(v) for k, v in value.items()}
        if isinstance(value, list):
            return [folded(v) for v in value]
        return value
    return json.dumps(folded(arguments), indent=2, ensure_ascii=False)
