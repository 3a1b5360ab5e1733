"""What a server's `/v1/models` says, checked: the model ids, each one's context length when the server
gives it (vLLM's `max_model_len`, LM Studio's and OpenRouter's `context_length`, llama.cpp's
`meta.n_ctx`: what it serves, not `n_ctx_train`, which its converter sets to 2^20 for every NemotronH),
and Elastic Chat's own `elastic` object (`runtime serve`: the submodels in
memory, smallest first, the depths it can run, its context and thinking ceiling).

A checkpoint whose submodels are served as models of their own is listed as `ID` plus `ID:SUBMODEL`
(as `runtime serve` lists it, or as a team names two vLLM instances behind one gateway): `describe`
groups them, so one choice in the window drives the whole depth slider.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import show
from .client import RemoteError

MAX_MODELS = 1000
MAX_ID_CHARS = 256
MAX_SUBMODEL_CHARS = 64
MAX_CONTEXT = 1 << 24  # 16M tokens: anything larger is a lie, not a model

# How a reply is produced on the server (reply.py):
ELASTIC = "elastic"  # an Elastic Chat server runs budget control and the switch itself (the `elastic` object)
PAIRS = "pairs"  # ID:SUBMODEL models without it: this client thinks on one and continues on another
SINGLE = "single"  # one model: depth maps onto enable_thinking, thinking_token_budget, reasoning_effort


@dataclass(frozen=True)
class RemoteModel:
    id: str
    mode: str  # ELASTIC, PAIRS or SINGLE
    submodels: tuple[str, ...]  # smallest first; SINGLE: the id alone
    model_ids: tuple[tuple[str, str], ...]  # submodel -> the model id that serves it
    context: int | None  # tokens, when the server says
    thinking_ceiling: int | None = None  # an Elastic Chat server's (its depth levels' budgets)
    depths: tuple[str, ...] = ()  # an Elastic Chat server's depths that can run there

    def model_id(self, submodel: str) -> str:
        return dict(self.model_ids)[submodel]


def _valid_id(value, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS or not value.isprintable():
        raise RemoteError(f"the server listed a {what} that is not a short printable name ({show(value, 40)}); "
                          "it is not an OpenAI-compatible server this program can use")
    return value


def _context(entry: dict) -> int | None:
    """The context length the entry declares, if any is a plausible number."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    elastic = entry.get("elastic") if isinstance(entry.get("elastic"), dict) else {}
    for value in (elastic.get("max_context"), entry.get("max_model_len"), entry.get("context_length"),
                  meta.get("n_ctx")):
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_CONTEXT:
            return value
    return None


def parse_listing(data) -> dict[str, dict]:
    """id -> its entry, from a `/v1/models` answer; RemoteError when it is not one."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise RemoteError("the server's /v1/models has no list of models ('data'); check that the address is an "
                          "OpenAI-compatible server")
    if len(items) > MAX_MODELS:
        raise RemoteError(f"the server lists more than {MAX_MODELS} models; this program does not read them all")
    out = {}
    for entry in items:
        if not isinstance(entry, dict):
            raise RemoteError("the server's /v1/models lists an entry that is not an object")
        out[_valid_id(entry.get("id"), "model id")] = entry
    if not out:
        raise RemoteError("the server lists no models; load one there first")
    return out


def _names(value, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > 16:
        raise RemoteError(f"the server's {what} is not a short list")
    names = []
    for name in value:
        if (not isinstance(name, str) or not 0 < len(name) <= MAX_SUBMODEL_CHARS or not name.isprintable()
                or ":" in name or name in names):
            raise RemoteError(f"the server's {what} holds {show(name, 40)}, which is not a submodel name")
        names.append(name)
    return tuple(names)


def choices(listing: dict[str, dict]) -> list[str]:
    """The ids a user may choose: every listed id (an `ID:SUBMODEL` one pins that submodel alone), and
    `ID` for two or more `ID:SUBMODEL` ids whose `ID` is not listed itself (a router in front of two
    servers lists only theirs)."""
    groups = [i.split(":", 1)[0] for i in listing if ":" in i]
    extra = [g for g in dict.fromkeys(groups) if g not in listing and len(_siblings(listing, g)) >= 2]
    return list(listing) + extra


def _siblings(listing: dict[str, dict], model_id: str) -> list[tuple[str, str]]:
    """(submodel, id) of each `model_id:SUBMODEL` id, smallest first when every name is a size such as
    12B or 0.5M, else in the server's order."""
    found = [(i[len(model_id) + 1:], i) for i in listing if i.startswith(model_id + ":")]
    found = [(s, i) for s, i in found if s and ":" not in s and len(s) <= MAX_SUBMODEL_CHARS]
    sizes = [_size(s) for s, _ in found]
    if None not in sizes:
        found = [pair for _, pair in sorted(zip(sizes, found), key=lambda t: t[0])]
    return found


def _size(name: str) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMBT])", name.strip(), re.IGNORECASE)
    return float(match[1]) * 1000 ** "KMBT".index(match[2].upper()) if match else None


def describe(listing: dict[str, dict], model_id: str) -> RemoteModel:
    """The chosen model, grouped with its `ID:SUBMODEL` siblings when it has any."""
    if model_id not in choices(listing):
        shown = ", ".join(show(i, 60) for i in list(listing)[:8])
        raise RemoteError(f"the server has no model {show(model_id)}; it lists {shown}")
    entry = listing.get(model_id, {})
    context = _context(entry)
    elastic = entry.get("elastic") if isinstance(entry.get("elastic"), dict) else None
    if elastic is not None and "submodels" in elastic:  # another Elastic Chat: it runs the depth itself
        subs = _names(elastic["submodels"], "list of submodels")
        if not subs:
            raise RemoteError("the server lists a checkpoint with no submodel in memory")
        depths = _names(elastic.get("depths", []), "list of depths")
        ceiling = elastic.get("thinking_ceiling")
        if not (isinstance(ceiling, int) and not isinstance(ceiling, bool) and 0 < ceiling <= MAX_CONTEXT):
            ceiling = None
        return RemoteModel(model_id, ELASTIC, subs, tuple((s, model_id) for s in subs), context, ceiling, depths)
    siblings = _siblings(listing, model_id)
    if len(siblings) >= 2:
        contexts = [c for _, i in siblings if (c := _context(listing[i])) is not None]
        return RemoteModel(model_id, PAIRS, tuple(s for s, _ in siblings), tuple(siblings),
                           min(contexts) if contexts else context)
    return RemoteModel(model_id, SINGLE, (model_id,), ((model_id, model_id),), context)
