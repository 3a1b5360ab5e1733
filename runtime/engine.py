"""The engine: a loaded elastic model, its tokenizer, and one cache per submodel reused
across turns. It brings a submodel's cache up to date with a context (reusing the longest
cached prefix, prefilling the rest in chunks) and reports what runs where.

Generation itself (budget control, events) lives in generate.py on top of this.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from . import generate
from .cache import SequenceCache
from .chat_format import ChatFormat
from .checkpoint.config import count_params, read_json
from .checkpoint.reader import ProgressFn
from .checkpoint.submodel_table import ESTIMATED, PARENT_ONLY, SubmodelTable, own_table
from .checkpoint.submodels import auto_policy
from .controls import Controls, StopRequested
from .depth import DepthLevel, default_level, depth_levels, thinking_ceiling
from .device import pick_device
from .errors import UsageError
from .events import Event, Prefill
from .generate import ChatRequest
from .model import ElasticModel
from .options import ENGINE_CONTEXT

PREFILL_CHUNK = 512


@dataclass(frozen=True)
class EngineStatus:
    checkpoint: str
    resident: str
    submodels: tuple[str, ...]  # in memory, fewest active parameters first
    compute_path: str
    weight_bytes: int
    cache_bytes: int
    max_context: int
    decode_path: str = "eager"  # "CUDA graph", or "eager (why)"


class Engine:
    def __init__(self, model: ElasticModel, max_context: int = ENGINE_CONTEXT, prefill_chunk: int = PREFILL_CHUNK,
                 table: SubmodelTable | None = None):
        self.model = model
        self.chat = ChatFormat(model.folder)
        self.max_context = max_context
        self.prefill_chunk = prefill_chunk
        self.caches: dict[str, SequenceCache] = {}
        # Which submodels' widths are verified, declared or estimated, and the table they came from.
        self.table = table if table is not None else (own_table(model.folder) or PARENT_ONLY)
        elastic = model.folder / "elastic.json"
        data = self.table.elastic or (read_json(elastic) if elastic.exists() else {})
        self.max_thinking_tokens = data.get("max_thinking_tokens")
        self.auto_policy = auto_policy(data, elastic)  # None: the depth table's default

    @classmethod
    def load(cls, folder, resident: str | None = None, device: str | None = None, dtype: str | None = None,
             max_context: int = ENGINE_CONTEXT, elastic: dict | None = None, table: SubmodelTable | None = None,
             progress: ProgressFn | None = None, cancelled: Callable[[], bool] | None = None,
             preflight: Callable[[Path, int, str | None], object] | None = None) -> "Engine":
        """Loads a checkpoint folder with `table` (the model store's `folder_table` adds the catalog's
        estimates for a folder without elastic.json), else `elastic` (a table object), else the
        folder's own elastic.json (or the parent alone). On the CPU it first runs `preflight(folder,
        max_context, resident)`, which raises to refuse the load (the commands pass the store's
        `check_cpu_fit`: the plan must fit the available RAM). `progress` and `cancelled`: as for
        `ElasticModel.load`."""
        if table is None:
            table = SubmodelTable(elastic, {}, "the caller's table") if elastic is not None else \
                (own_table(folder) or PARENT_ONLY)
        if preflight is not None and pick_device(device, "float32")[0].type == "cpu":
            preflight(Path(folder), max_context, resident)
        engine = cls(ElasticModel.load(Path(folder), resident, device, dtype, table.elastic, progress, cancelled),
                     max_context, table=table)
        engine.prepare_decode()
        return engine

    # ------------------------------------------------------------------ what is available

    def submodels_by_size(self) -> list[str]:
        """Submodels in memory, fewest active parameters first."""
        cfg = self.model.config
        names = list(self.model.views)
        return sorted(names, key=lambda n: count_params(cfg, self.model.submodels[n]).active)

    @property
    def thinking_ceiling(self) -> int:
        """Longest thinking budget worth offering (depth.thinking_ceiling's rule)."""
        return thinking_ceiling(self.max_thinking_tokens, self.max_context)

    def all_submodels_by_size(self) -> list[str]:
        """Every submodel of the checkpoint, in memory or not, fewest active parameters first."""
        cfg = self.model.config
        return sorted(self.model.submodels, key=lambda n: count_params(cfg, self.model.submodels[n]).active)

    def depth_levels(self) -> list[DepthLevel]:
        """The slider's stops; those whose thinking submodel is not in memory are unavailable, those
        whose thinker's widths are only estimated say so; Auto climbs by this checkpoint's policy."""
        estimated = {n for n in self.model.submodels if self.table.state(n) == ESTIMATED}
        return depth_levels(self.all_submodels_by_size(), self.thinking_ceiling, loaded=set(self.model.views),
                           estimated=estimated, policy=self.auto_policy)

    def default_depth(self) -> str:
        """The stop a new chat starts on (depth.default_level): never one whose thinker is estimated."""
        return default_level(self.depth_levels()).name

    def status(self) -> EngineStatus:
        return EngineStatus(str(self.model.folder), self.model.resident.name, tuple(self.submodels_by_size()),
                            self.model.compute_path(),
                            self.model.resident_bytes(), sum(c.nbytes() for c in self.caches.values()),
                            self.max_context, self.model.decode_path())

    # ------------------------------------------------------------------ replies (chat_engine.ChatEngine)

    def stream(self, request: ChatRequest, controls: Controls | None = None) -> Iterator[Event]:
        """A reply's events (generate.stream_chat), as a remote engine's `stream` gives them."""
        return generate.stream_chat(self, request, controls)

    def token_counter(self, request: ChatRequest) -> Callable[[list[dict]], int]:
        """Counts a conversation's tokens as `request`'s prompt renders it: with or without thinking,
        and with the tools it offers (the template renders them, so they take room too)."""
        thinking = request.think_submodel is not None and request.thinking_budget != 0
        tools = list(request.tools) if request.tools else None

        def count(messages: list[dict]) -> int:
            return len(self.chat.prompt_ids(messages, enable_thinking=thinking,
                                            truncate_history_thinking=request.truncate_history_thinking, tools=tools))
        return count

    # ------------------------------------------------------------------ caches

    def cache(self, name: str) -> SequenceCache:
        if name not in self.caches:
            self.caches[name] = self.model.new_cache(name, self.max_context)
        return self.caches[name]

    def decoder(self, name: str):
        """Submodel `name`'s decode step over its cache (decode_step.DecodeStep)."""
        return self.model.decoder(name, self.cache(name))

    def prepare_decode(self) -> str:
        """On a GPU, captures every submodel's decode step now (at the shortest key span), so a
        capture failure shows in the status at load rather than mid-reply; returns the decode path."""
        if self.model.graphs.enabled:
            for name in self.model.views:
                cache = self.cache(name)
                cache.reset()
                self.model.forward(name, cache, [0])
                cache.reset()
        return self.model.decode_path()

    def catch_up(self, name: str, context: list[int], boundary: int | None = None,
                 controls: Controls | None = None, scope: str = "") -> tuple[Prefill, torch.Tensor]:
        """Brings submodel `name`'s cache to exactly `context`; returns the prefill report and the
        logits after the last context token.

        Reuses the longest cached prefix (the live state or a snapshot) that replies of the same
        `scope` left (ChatRequest.cache_scope); prefills the rest in chunks, polling `controls`
        between chunks. When the prefill crosses `boundary` (the start of the assistant turn), a
        snapshot is taken there for the next turn to resume from.
        """
        if len(context) > self.max_context:
            raise UsageError(f"the conversation ({len(context)} tokens) is longer than the context "
                             f"({self.max_context}); start a new chat or raise the context length")
        start = time.perf_counter()
        cache = self.cache(name)
        reused = self._reuse_prefix(cache, context, scope)
        logits = None
        pos = cache.length
        while pos < len(context):
            if controls is not None and controls.stop_requested:
                raise StopRequested
            end = min(len(context), pos + self.prefill_chunk)
            if boundary is not None and pos < boundary < end:
                end = boundary
            logits = self.model.forward(name, cache, context[pos:end])
            pos = end
            if pos == boundary:
                cache.snapshot()
        ms = (time.perf_counter() - start) * 1000
        return Prefill(name, len(context), reused, len(context) - reused, ms), logits

    def transplant(self, source: str, target: str, context: list[int], prompt_len: int,
                   controls: Controls | None = None, scope: str = "") -> tuple[Prefill, torch.Tensor]:
        """APPROXIMATE switch: `target` takes over `source`'s state for the thinking tokens instead of
        re-prefilling them. Attention KV is copied as is (heads are not elastic); the Mamba state of
        the heads both submodels share is copied, the target's extra heads keep their state at the end
        of the prompt. Only the tokens `source` has not run yet are prefilled. Opt-in only.

        The target always runs the last token itself, since its logits are the answer's first: when
        `source` has already run it too (the model's own `</think>`, which the decode loop runs before
        the host reads it), the attention KV is taken up to the token before, and the shared Mamba
        heads, whose state cannot step back, see that one token twice (one more approximation)."""
        start = time.perf_counter()
        src, dst = self.cache(source), self.cache(target)
        done = src.length
        if done <= prompt_len or src.tokens != context[:done] or src.scope != scope:  # nothing to transplant
            return self.catch_up(target, context, None, controls, scope)  # so do it exactly
        prefill, _ = self.catch_up(target, context[:prompt_len], None, controls, scope)
        done = min(done, len(context) - 1)  # at least one token left for the target to run
        for mine, theirs in zip(dst.layers, src.layers):
            if hasattr(mine, "k"):
                mine.k[:, prompt_len:done] = theirs.k[:, prompt_len:done]
                mine.v[:, prompt_len:done] = theirs.v[:, prompt_len:done]
            elif hasattr(mine, "ssm"):  # shared heads are a prefix of both (rank-major), either may be larger
                heads = min(mine.ssm.shape[0], theirs.ssm.shape[0])
                channels = min(mine.conv.shape[0], theirs.conv.shape[0])
                mine.ssm[:heads] = theirs.ssm[:heads]
                mine.conv[:channels] = theirs.conv[:channels]
        dst.tokens[:] = context[:done]
        logits = self.model.forward(target, dst, context[done:])
        ms = (time.perf_counter() - start) * 1000
        run = prefill.prefilled_tokens + len(context) - done
        return Prefill(target, len(context), len(context) - run, run, ms), logits

    @staticmethod
    def _reuse_prefix(cache: SequenceCache, context: list[int], scope: str) -> int:
        """Leaves the cache at the longest usable prefix of `context`; returns its length.
        At least one token is always left to run, since its logits are needed. What another scope
        left is never usable: what it reused, and how fast, would tell one client another's prompt."""
        if cache.scope != scope:
            cache.reset()
            cache.scope = scope
            return 0
        n = cache.length
        if 0 < n < len(context) and cache.tokens == context[:n]:
            return n
        usable = [s for s in cache.snapshots
                  if len(s.tokens) < len(context) and list(s.tokens) == context[:len(s.tokens)]]
        if usable:
            best = max(usable, key=lambda s: len(s.tokens))
            cache.restore(best)
            return len(best.tokens)
        cache.reset()
        return 0

    def release(self) -> None:
        """Frees the caches (the weights go with the engine itself)."""
        self.caches.clear()
