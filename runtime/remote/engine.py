"""A model on a remote server, held the way the app and the CLI hold a local `Engine`: its depth
levels, the level a new chat starts on, its status line, and `stream` for a reply's events.

Depth on a remote is honest about what the server can do (models.py's modes):

- ELASTIC (another Elastic Chat): every level the server can run, with its own thinking ceiling,
  so a level means exactly what it means there; Auto included (the server watches the thinker).
- PAIRS (`ID:SUBMODEL` models of a plain server): the levels over those submodels; Auto is
  unavailable (it needs each token's uncertainty, which the API does not stream).
- SINGLE (one model): every level thinks and answers on that model, its budget sent as the
  server's thinking budget; Auto is unavailable for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from ..depth import DepthLevel, default_level, depth_levels, thinking_ceiling
from ..options import ENGINE_CONTEXT
from .client import RemoteServer
from .continuation import continue_refusal
from .models import ELASTIC, RemoteModel, describe, parse_listing
from .reply import stream_remote
from .server_kind import OTHER, ServerKind, server_kind
from .token_count import RemoteTokenCount

NO_SIGNALS = ("Auto needs the thinker's uncertainty at each token, which an OpenAI-compatible server does not "
              "stream; it runs on a local model or on an Elastic Chat server")
NOT_THERE = "the server cannot run it (its thinking submodel is not in memory there)"


@dataclass(frozen=True)
class RemoteStatus:
    """What the live strip shows for a remote model (the local engine's EngineStatus has weights and caches)."""
    address: str  # host:port of the machine that answers
    model: str
    mode: str
    submodels: tuple[str, ...]
    max_context: int
    context_known: bool  # False: the server did not say, and max_context is this program's default

    # What the window shows where a local engine shows its compute and decode paths.
    compute_path = property(lambda self: f"remote: {self.address}")
    decode_path = property(lambda self: f"on the server ({self.mode})")


def list_models(server: RemoteServer, stop: Callable[[], bool] | None = None) -> dict[str, dict]:
    """The server's models (id -> entry), checked."""
    return parse_listing(server.get_json("/models", stop))


class RemoteEngine:
    """A server's model as a `chat_engine.ChatEngine`: what it streams is the server's reply."""

    def __init__(self, server: RemoteServer, model: RemoteModel, kind: ServerKind = OTHER):
        self.server, self.model, self.kind = server, model, kind  # kind: which fields it reads (server_kind.py)
        self.max_context = model.context or ENGINE_CONTEXT

    @classmethod
    def connect(cls, server: RemoteServer, model_id: str, stop: Callable[[], bool] | None = None) -> "RemoteEngine":
        """Probes `/v1/models` and holds `model_id` (grouped with its `ID:SUBMODEL` siblings), and, on a
        server that is not an Elastic Chat, asks what serves it (server_kind.py)."""
        listing = list_models(server, stop)
        model = describe(listing, model_id)
        if model.mode == ELASTIC:
            return cls(server, model)
        return cls(server, model, server_kind(server, listing.get(model.model_ids[0][1], {}), stop))

    @property
    def thinking_ceiling(self) -> int:
        return self.model.thinking_ceiling or thinking_ceiling(None, self.max_context)

    def submodels_by_size(self) -> list[str]:
        return list(self.model.submodels)

    all_submodels_by_size = submodels_by_size

    def depth_levels(self) -> list[DepthLevel]:
        levels = depth_levels(list(self.model.submodels), self.thinking_ceiling)
        if self.model.mode == ELASTIC:
            offered = {d.lower() for d in self.model.depths}
            return [level if level.name.lower() in offered else replace(level, unavailable=NOT_THERE)
                    for level in levels]
        return [replace(level, unavailable=NO_SIGNALS) if level.escalation else level for level in levels]

    def default_depth(self) -> str:
        return default_level(self.depth_levels()).name

    def status(self) -> RemoteStatus:
        m = self.model
        return RemoteStatus(self.server.address, m.id, m.mode, m.submodels, self.max_context, m.context is not None)

    def stream(self, request, controls=None) -> Iterator:
        """The reply's events (reply.py), like `generate.stream_chat` for a local engine."""
        return stream_remote(self, request, controls)

    def continue_refusal(self, continued) -> str:
        """Why a reply cut by its token limit (a reply_record.Continuation) cannot go on here ("" when it can)."""
        return continue_refusal(self.kind, self.model.mode, continued)

    def prompt_counter(self) -> RemoteTokenCount:
        """What counts this model's prompts for the window's meter: the server's tokenizer, or an estimate."""
        return RemoteTokenCount(self.server, self.model, self.kind)

    def token_counter(self, request) -> None:
        """None: the server's tokenizer counts; a chat goes as it is, and the server says if it is too long."""
        return None

    def release(self) -> None:
        """Nothing to free: the server holds the weights and caches."""
