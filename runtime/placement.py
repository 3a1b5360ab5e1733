"""Where the routed experts live: on the compute device with everything else, or in RAM and computed
there by the CPU (the activations cross, the weights stay), as llama.cpp's --cpu-moe / --n-cpu-moe do
for a card that cannot hold the file.

    none         everything on the device (the default)
    all          every MoE layer's routed experts in RAM
    N            the routed experts of the first N MoE layers in RAM, the rest on the device
    nested:NAME  every MoE layer's routed experts in RAM, and submodel NAME's slice of them (its leading
                 experts at its widths) on the device as well

Everything every token uses stays on the device: embeddings, Mamba, attention, shared experts, routers
and the head. Only the elastic nesting makes `nested` possible: a smaller submodel uses a leading subset
of each layer's experts at leading widths, so NAME, and every submodel within it, runs wholly on the
device (a thought on the 12B never leaves the card), while a larger submodel's routed experts run in RAM.

Experts in RAM stay views of the memory-mapped files (file-backed pages, no private copy: load.py), so
on a GPU load they cost host memory the OS can drop and reread. On CUDA a layer whose experts run on the
CPU copies its activations to the host and back, so the decode step of a submodel that reaches RAM runs
eagerly, not as one CUDA graph (model.py's `decode_path` says which submodels do).
"""

from __future__ import annotations

from dataclasses import dataclass

from .checkpoint.config import MOE, ModelConfig
from .checkpoint.submodels import Submodel
from .errors import UsageError

NONE, ALL, NESTED = "none", "all", "nested"
EXPERTS_IN_RAM = "routed experts in RAM: each such MoE layer copies its activations to the CPU and back"
ON_DEVICE = ("embeddings", "Mamba", "attention", "shared experts", "routers", "the head")


@dataclass(frozen=True)
class ExpertPlacement:
    host_layers: int | None = 0  # MoE layers (the first ones) whose routed experts live in RAM; None: all
    keep: str | None = None  # nested: the submodel whose slice of every layer's experts stays on the device

    @classmethod
    def parse(cls, text: str | None) -> "ExpertPlacement":
        """`none`, `all`, a number of MoE layers, or `nested:NAME` (the --cpu-experts flag's values)."""
        value = (text or NONE).strip()
        if value.lower() == NONE:
            return cls()
        if value.lower() == ALL:
            return cls(None)
        if value.lower().startswith(NESTED + ":") and value.split(":", 1)[1].strip():
            return cls(None, value.split(":", 1)[1].strip())
        if value.isascii() and value.isdigit() and len(value) <= 4:
            return cls(int(value)) if int(value) else cls()
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise UsageError(f"--cpu-experts {shown!r}: use none, all, a number of MoE layers (their routed "
                         "experts go to RAM, the first ones first) or nested:SUBMODEL (that submodel's experts "
                         "stay on the GPU)")

    @property
    def spec(self) -> str:
        """The value that parses back to this placement."""
        if self.keep is not None:
            return f"{NESTED}:{self.keep}"
        return ALL if self.host_layers is None else str(self.host_layers) if self.host_layers else NONE

    @property
    def active(self) -> bool:
        return self.host_layers != 0

    def on_host(self, cfg: ModelConfig) -> frozenset[int]:
        """The layer indices whose routed experts live in RAM."""
        moe = cfg.layers_of(MOE)
        count = len(moe) if self.host_layers is None else self.host_layers
        if count > len(moe):
            raise UsageError(f"--cpu-experts {count}: this model has {len(moe)} MoE layers")
        return frozenset(moe[:count])

    def kept(self, subs) -> Submodel | None:
        """The submodel whose experts stay on the device (nested), checked against the checkpoint's."""
        if self.keep is None:
            return None
        by_name = {s.name: s for s in subs}
        if self.keep not in by_name:
            raise UsageError(f"--cpu-experts {self.spec}: this checkpoint has no submodel {self.keep!r} "
                             f"(it has {', '.join(by_name)})")
        return by_name[self.keep]


def experts_within(sub: Submodel, other: Submodel, layer: int) -> bool:
    """Whether `sub`'s routed experts of `layer` are a slice of `other`'s (experts, widths, hidden)."""
    return (sub.hidden_size <= other.hidden_size and sub.n_routed_experts[layer] <= other.n_routed_experts[layer]
            and sub.moe_intermediate_size[layer] <= other.moe_intermediate_size[layer])


def describe(placement: ExpertPlacement, cfg: ModelConfig, device: str, host_bytes: int) -> str:
    """Where each part lives, in words (the engine status)."""
    if not placement.active:
        return f"all weights on {device}"
    layers = len(placement.on_host(cfg))
    total = len(cfg.layers_of(MOE))
    which = "every MoE layer" if layers == total else f"the first {layers} of {total} MoE layers"
    gb = f"{host_bytes / 1e9:.1f} GB"
    kept = f"; {placement.keep}'s slice of them also on {device}, so {placement.keep} runs there alone" \
        if placement.keep else ""
    return (f"{device}: {', '.join(ON_DEVICE)}" + ("" if layers == total else ", the other layers' routed experts")
            + f"; RAM (computed by the CPU): the routed experts of {which} ({gb}, pages of the file){kept}")
