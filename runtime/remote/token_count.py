"""How many tokens a prompt takes on a remote engine, for the window's context meter and attachment chips.

The tokenizer is on the server, so the server counts where it has a route for it: llama.cpp renders the
chat with `/apply-template` and counts with `/tokenize`, vLLM counts a chat (template included) or a text
with its `/tokenize`, and an Elastic Chat server with Anthropic's `/v1/messages/count_tokens`. Any other
server, or one whose route fails, gets an estimate: its characters divided by 4, said as such with why.
A route that failed once is not asked again (the counter asks on every pause in typing).
"""

from __future__ import annotations

import json
import threading

from ..errors import ElasticError
from .client import RemoteError, RemoteServer
from .models import ELASTIC, RemoteModel
from .reply import MESSAGE_KEYS
from .server_kind import LLAMA_CPP, VLLM, ServerKind

CHARS_PER_TOKEN = 4  # the estimate's rule: about 4 characters a token for English text and code


def estimate(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


class RemoteTokenCount:
    """Counts for one model on one server. Each count is one or two short requests (RemoteServer's bounds);
    it runs in the app's counting thread, never on the GUI's."""

    def __init__(self, server: RemoteServer, model: RemoteModel, kind: ServerKind):
        self.server, self.model, self.kind = server, model, kind
        self.stopped = threading.Event()  # set by `stop` (the app quits): a request in flight ends at once
        self.model_id = model.model_id(model.submodels[-1])  # (every submodel reads the same tokenizer)
        knows = model.mode == ELASTIC or kind in (LLAMA_CPP, VLLM)  # a route that counts
        self.failed = "" if knows else f"the server at {server.address} has no tokenizer route this program knows"

    def count(self, messages, thinking: bool, tools=None) -> tuple[int, str]:
        """(tokens, how): how is "" when the server's tokenizer counted, else what the estimate is and why."""
        messages = [{k: m[k] for k in MESSAGE_KEYS if k in m} for m in messages]  # (as a reply sends them)
        if not self.failed:
            try:
                return self._counted(messages, thinking, tools), ""
            except ElasticError as e:  # (a RemoteError, or RemoteStopped by `stop`)
                self.failed = str(e)
        text = "".join(str(m.get(k) or "") for m in messages for k in ("content", "reasoning_content"))
        return estimate(text + (json.dumps(tools) if tools else "")), self._estimated()

    def count_text(self, text: str) -> tuple[int, str]:
        """(tokens of `text` alone, how), as `count` says it."""
        if not self.failed:
            try:
                return self._tokens_of(text), ""
            except ElasticError as e:  # (a RemoteError, or RemoteStopped by `stop`)
                self.failed = str(e)
        return estimate(text), self._estimated()

    def stop(self) -> None:
        """Any thread: ends a count's request in flight (it is estimated) and asks no more."""
        self.stopped.set()

    def _post(self, path: str, body: dict, root: bool = True) -> dict:
        return self.server.post_json(path, body, self.stopped.is_set, root=root)

    def _estimated(self) -> str:
        return f"estimated from its characters ({CHARS_PER_TOKEN} a token): {self.failed}"

    # ------------------------------------------------------------------ the servers' routes

    def _counted(self, messages: list[dict], thinking: bool, tools) -> int:
        kwargs = {"enable_thinking": thinking}
        if self.model.mode == ELASTIC:
            system = "\n\n".join(m["content"] for m in messages if m.get("role") == "system")
            body = {"model": self.model.id, "messages": [{"role": m["role"], "content": m.get("content") or ""}
                                                         for m in messages if m.get("role") in ("user", "assistant")]}
            if system:
                body["system"] = system
            return _count(self._post("/messages/count_tokens", body, root=False), "input_tokens", self.server)
        if self.kind == VLLM:
            body = {"model": self.model_id, "messages": messages, "add_generation_prompt": True,
                    "chat_template_kwargs": kwargs, **({"tools": list(tools)} if tools else {})}
            return _count(self._post("/tokenize", body), "count", self.server)
        body = {"messages": messages, "chat_template_kwargs": kwargs, **({"tools": list(tools)} if tools else {})}
        prompt = self._post("/apply-template", body).get("prompt")
        if not isinstance(prompt, str):
            raise RemoteError(f"the server at {self.server.address} answered /apply-template without a prompt")
        return self._tokens_of(prompt)

    def _tokens_of(self, text: str) -> int:
        if self.model.mode == ELASTIC:  # Anthropic's route counts a whole request: a message with it, less one without
            return max(0, self._counted([{"role": "user", "content": text}], False, None)
                       - self._counted([{"role": "user", "content": ""}], False, None))
        if self.kind == VLLM:
            body = {"model": self.model_id, "prompt": text, "add_special_tokens": False}
            return _count(self._post("/tokenize", body), "count", self.server)
        tokens = self._post("/tokenize", {"content": text}).get("tokens")
        if not isinstance(tokens, list):
            raise RemoteError(f"the server at {self.server.address} answered /tokenize without a list of tokens")
        return len(tokens)


def _count(answer: dict, key: str, server: RemoteServer) -> int:
    value = answer.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise RemoteError(f"the server at {server.address} counted tokens without a count ({key})")
    return value
