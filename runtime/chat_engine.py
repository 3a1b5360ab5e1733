"""The shape every engine a chat runs on has: the local `Engine` (runtime/engine.py) and a model on
someone else's server (`RemoteEngine`, runtime/remote/engine.py) alike, so the window, the CLI and the
engine queue hold either without asking which it is.

    engine.stream(request, controls)   # a reply's events (runtime/events.py), Done always last
    engine.depth_levels(), engine.default_depth(), engine.thinking_ceiling
    engine.status(), engine.max_context, engine.token_counter(request)

tests/runtime/test_chat_engine.py checks that both kinds satisfy it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # (annotations only: this module imports nothing at run time)
    from .controls import Controls
    from .depth import DepthLevel
    from .events import Event
    from .generate import ChatRequest

# Tokens in a conversation, as one request's prompt (its thinking switch, its tools) would hold them
TokenCounter = Callable[[list[dict]], int]


@runtime_checkable
class ChatEngine(Protocol):
    max_context: int  # the longest context a reply may fill, prompt included

    @property
    def thinking_ceiling(self) -> int:
        """The Max depth level's budget, the unit of "Think longer"."""

    def stream(self, request: ChatRequest, controls: Controls | None = None) -> Iterator[Event]:
        """One reply's events, Done always last. A request the engine cannot run is refused here, with
        an ElasticError, before any event."""

    def depth_levels(self) -> list[DepthLevel]:
        """The depth slider's levels, each saying whether it can run here and why not."""

    def default_depth(self) -> str:
        """The level a new chat starts on."""

    def submodels_by_size(self) -> list[str]:
        """The submodels that can run, smallest first."""

    def all_submodels_by_size(self) -> list[str]:
        """Every submodel of the model, those that cannot run here included, smallest first."""

    def status(self):
        """What the live strip shows: an EngineStatus, or a remote model's RemoteStatus."""

    def token_counter(self, request: ChatRequest) -> TokenCounter | None:
        """Counts a conversation's tokens as `request`'s prompt; None when that cannot be done here (a
        remote model's tokenizer is its server's), so a chat is sent as it is."""

    def release(self) -> None:
        """Frees what the engine holds on this PC."""
