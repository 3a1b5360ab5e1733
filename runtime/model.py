"""An elastic NemotronH checkpoint in memory: one resident copy of the weights, every nested
submodel as views into it, and the forward pass that runs any of them.

    model = ElasticModel.load("assets/demo")           # parent resident, all submodels ready
    cache = model.new_cache("12M", max_len=4096)
    logits = model.forward("12M", cache, [1, 2, 3])     # (1, vocab) logits of the last token

Several tokens run as a prefill (`forward` below); one token runs through the decode step
(decode_step.py), the same step the engine replays as a CUDA graph on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .attention import attention
from .cache import SequenceCache, new_cache
from .checkpoint.check import inspect_checkpoint
from .checkpoint.config import ATTENTION, MAMBA, MLP, ModelConfig, count_params
from .checkpoint.load import load_weights
from .checkpoint.quant import QuantSpec
from .checkpoint.reader import MappedShards, ProgressFn
from .checkpoint.submodels import Submodel
from .checkpoint.weights import ModelWeights, is_linear, resident_bytes, submodel_views
from .cuda_graphs import GraphSet
from .decode_step import DecodeStep, rms_norm
from .device import pick_device
from .errors import UsageError
from .mamba import mamba_mixer
from .matmul import describe as describe_kernel
from .matmul import linear
from .moe import mlp, moe


def forward(cfg: ModelConfig, w: ModelWeights, cache: SequenceCache, ids: list[int], all_logits: bool = False):
    """Runs tokens `ids` (a prefill chunk) after the cache's sequence and appends them to it.

    Returns fp32 logits: (T, vocab) if all_logits else (1, vocab) for the last token.
    """
    pos = cache.length
    x = F.embedding(torch.tensor(ids, device=w.embed.device), w.embed)  # (T, hidden)
    for layer, state in zip(w.layers, cache.layers):
        y = rms_norm(x, layer.norm, cfg.layer_norm_epsilon)
        if layer.kind == MAMBA:
            y = mamba_mixer(y, layer.mixer, state, cfg)
        elif layer.kind == ATTENTION:
            y = attention(y, layer.mixer, state, pos, cfg)
        elif layer.kind == MLP:
            y = mlp(y, layer.mixer)
        else:
            y = moe(y, layer.mixer, cfg)
        x = x + y
    cache.tokens.extend(ids)
    if not all_logits:
        x = x[-1:]
    return linear(rms_norm(x, w.norm_f, cfg.layer_norm_epsilon), w.lm_head).float()


@dataclass
class ElasticModel:
    folder: Path
    config: ModelConfig
    submodels: dict[str, Submodel]  # every submodel in elastic.json, parent first
    resident: Submodel  # whose slices are in memory
    weights: ModelWeights  # the resident tensors
    views: dict[str, ModelWeights]  # the submodels that fit within the resident one
    device: torch.device
    dtype: torch.dtype
    quant: QuantSpec | None = None  # None: a dense (BF16/FP16/FP32) checkpoint
    mapped: MappedShards | None = None  # the shard mappings CPU weights are views of
    graphs: GraphSet = field(init=False)  # whether decode steps replay as CUDA graphs, and why not

    def __post_init__(self):
        self.graphs = GraphSet(self.device)

    @classmethod
    def load(cls, folder, resident: str | None = None, device: str | None = None, dtype: str | None = None,
             elastic: dict | None = None, progress: ProgressFn | None = None,
             cancelled: Callable[[], bool] | None = None) -> "ElasticModel":
        """Loads a checkpoint folder.

        Args:
            resident: the submodel whose slices are read from disk (default: the parent).
                Every submodel that fits within it is then available as views.
            device, dtype: as for `pick_device` ("auto" unless given).
            elastic: an `elastic.json` object to use instead of the folder's (from the catalog).
            progress: called after every tensor read with a `LoadProgress` (bytes of the total, the shard).
            cancelled: polled between tensors; True stops the load with `LoadCancelled`.
        """
        folder = Path(folder)
        # The one validation `models verify` runs too (checkpoint/check.py), so they cannot diverge.
        checked = inspect_checkpoint(folder, elastic)
        cfg, quant, subs, table = checked.config, checked.quant, checked.submodels, checked.table
        by_name = {s.name: s for s in subs}
        root = subs[0] if resident is None else by_name.get(resident)
        if root is None:
            raise UsageError(f"unknown submodel {resident!r}; this checkpoint has {', '.join(by_name)}")
        bf16 = sum(info.nbytes for name, info in table.items() if info.dtype == "BF16"
                   and not (is_linear(name) and name + "_scale" in table))
        dev, dt = pick_device(device, dtype, bf16)
        weights, mapped = load_weights(cfg, table, root, dev, dt, progress, cancelled)
        views = {s.name: submodel_views(cfg, weights, s) for s in subs if s.fits_within(root)}
        return cls(folder, cfg, by_name, root, weights, views, dev, dt, quant, mapped)

    @property
    def parent(self) -> Submodel:
        return next(iter(self.submodels.values()))

    def submodel(self, name: str | None) -> Submodel:
        """The submodel called `name` (None: the largest one available)."""
        if name is None:
            return self.resident
        if name not in self.submodels:
            raise UsageError(f"unknown submodel {name!r}; this checkpoint has {', '.join(self.submodels)}")
        if name not in self.views:
            raise UsageError(f"submodel {name!r} is not loaded: only {self.resident.name!r} and the submodels "
                             "within it are in memory")
        return self.submodels[name]

    def new_cache(self, name: str, max_len: int) -> SequenceCache:
        return new_cache(self.config, self.submodel(name), max_len, self.device, self.dtype)

    @torch.inference_mode()
    def forward(self, name: str, cache: SequenceCache, ids, all_logits: bool = False) -> torch.Tensor:
        """Logits for `ids` continuing the cached sequence of submodel `name`."""
        if cache.submodel != name:
            raise UsageError(f"this cache belongs to submodel {cache.submodel!r}, not {name!r}")
        # Checked on the host: a GPU tensor check would wait for the device on every token.
        ids = ids.reshape(-1).tolist() if isinstance(ids, torch.Tensor) else [int(t) for t in ids]
        if not ids:
            raise UsageError("no tokens to run")
        if cache.length + len(ids) > cache.max_len:
            raise UsageError(f"the context is full ({cache.max_len} tokens)")
        if min(ids) < 0 or max(ids) >= self.config.vocab_size:
            raise UsageError(f"token ids must lie in 0..{self.config.vocab_size - 1}")
        if len(ids) == 1:
            return self.decoder(name, cache).forward_token(ids[0]).clone()
        return forward(self.config, self.views[name], cache, ids, all_logits)

    def decoder(self, name: str, cache: SequenceCache) -> DecodeStep:
        """The decode step of submodel `name` over `cache` (made once per cache: its graphs
        are bound to the cache's buffers)."""
        if cache.submodel != name:
            raise UsageError(f"this cache belongs to submodel {cache.submodel!r}, not {name!r}")
        if cache.step is None:
            cache.step = DecodeStep(self.config, self.views[name], cache, self.device, self.graphs)
        return cache.step

    def decode_path(self) -> str:
        """How decode steps run, in words: "CUDA graph" or "eager (why)"."""
        return self.graphs.status

    def resident_bytes(self) -> int:
        """Bytes of weights in memory: every available submodel together (views share storage)."""
        return resident_bytes(self.weights, *self.views.values())

    def compute_path(self) -> str:
        """What runs the matmuls, in words (the GUI shows it), e.g. "NVFP4 native matmul"."""
        precision = str(self.dtype).removeprefix("torch.")
        if self.quant is None:
            where = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else self.device.type.upper()
            return f"{where}, {precision} weights" + (" (reference)" if self.device.type == "cpu" else "")
        choices = [describe_kernel(self.device, fmt) for fmt in self.quant.formats]
        return "; ".join(c.label + (f" ({c.note})" if c.note else "") for c in choices)

    def describe(self) -> list[dict]:
        """One row per submodel: name, parameter counts, whether it is in memory."""
        rows = []
        for s in self.submodels.values():
            n = count_params(self.config, s)
            rows.append({"name": s.name, "params": n.total, "active_params": n.active, "loaded": s.name in self.views})
        return rows


