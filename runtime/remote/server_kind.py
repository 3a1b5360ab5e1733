"""Which engine serves a remote model, and the request fields that engine reads. OpenAI-compatible
servers agree on the API's own fields and differ on their extensions: the thinking budget is vLLM's
`thinking_token_budget` and llama.cpp's `thinking_budget_tokens`, and continuing a final assistant
turn (the answer after a thought another model had: reply.py's PAIRS) is vLLM's and SGLang's
`continue_final_message: true`, where llama.cpp, given a final turn with a thought and no text,
continues the thought unless told `continue_final_message: "content"`. Continue (a reply cut by its
token limit) uses the same fields, where the engine is known to honour them (continuation.py).

The server is asked what it is: its `/v1/models` entry says (`owned_by` llamacpp or vllm), else
llama.cpp's `/props` or vLLM's `/version` answers (each a GET at the server's root). A server that
says neither gets both budget fields (each engine ignores the other's) and vLLM's continuation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .client import RemoteError, RemoteServer


@dataclass(frozen=True)
class ServerKind:
    name: str  # as a message names it
    budget_fields: tuple[str, ...]  # where its chat completions read a thinking budget
    # the fields that make it continue a final assistant turn (a closed thought) as the answer
    continue_answer: dict = field(default_factory=dict)
    # Continue (continuation.py): whether it is known to go on from a final assistant turn's text (a cut
    # answer), and the fields that make it go on with the turn's open thought (None: it cannot say so)
    continues_answers: bool = False
    continue_thought: dict | None = None


# vLLM continues the final message's text; a thought it renders closed (its template writes `</think>` after
# `reasoning_content`), so it has no way to go on with one.
VLLM = ServerKind("vLLM", ("thinking_token_budget",), {"continue_final_message": True, "add_generation_prompt": False},
                  continues_answers=True)
# llama.cpp prefills a final assistant turn: with a thought and no text, it goes on with the thought.
LLAMA_CPP = ServerKind("llama.cpp", ("thinking_budget_tokens",),
                       {"continue_final_message": "content", "add_generation_prompt": False},
                       continues_answers=True, continue_thought={"add_generation_prompt": False})
OTHER = ServerKind("an OpenAI-compatible server", ("thinking_token_budget", "thinking_budget_tokens"),
                   VLLM.continue_answer)


def said_by_listing(entry: dict) -> ServerKind | None:
    """The kind a `/v1/models` entry names (`owned_by`, or llama.cpp's `meta`), if it names one."""
    owner = entry.get("owned_by")
    if owner == "llamacpp" or (isinstance(entry.get("meta"), dict) and "n_ctx" in entry["meta"]):
        return LLAMA_CPP
    if owner == "vllm":
        return VLLM
    return None


def server_kind(server: RemoteServer, entry: dict, stop: Callable[[], bool] | None = None) -> ServerKind:
    """What serves `entry` (a `/v1/models` entry of `server`): as the listing says, else as llama.cpp's
    `/props` or vLLM's `/version` answer; OTHER when neither does (a 404, an error, another shape)."""
    said = said_by_listing(entry)
    if said is not None:
        return said
    for path, kind, looks_like in (("/props", LLAMA_CPP, lambda d: "default_generation_settings" in d),
                                   ("/version", VLLM, lambda d: isinstance(d.get("version"), str) and len(d) == 1)):
        try:
            answer = server.get_json(path, stop, root=True)
        except RemoteError:
            continue
        if looks_like(answer):
            return kind
    return OTHER
