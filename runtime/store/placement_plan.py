"""Experts in RAM for a GPU that cannot hold the file (placement.py): the placements worth offering,
what each puts on the GPU and in RAM, and the speed each submodel can expect under each.

Candidates, when the parent does not fit the GPU plainly:

* `all`: every MoE layer's routed experts in RAM (llama.cpp's --cpu-moe);
* `N`: the fewest first MoE layers whose experts must go to RAM for the rest to fit (--n-cpu-moe N);
* `nested:NAME` for each smaller submodel: all experts in RAM, and NAME's slice of them on the GPU too,
  so NAME (and what nests in it) runs wholly on the card and only larger submodels reach RAM;
* the plain split it is weighed against: the largest submodel that fits, alone on the card.

Expected speed is the bandwidth bound of one decode step: the bytes of weights it reads on the GPU over
the GPU's memory bandwidth plus the bytes it reads in RAM over the RAM's (both from the probe: NVML's
bus width and memory clock, a streaming read measured when probing), done one after the other (the GPU
waits for the CPU's experts). It leaves out the activations' trips across PCIe (a few KB a layer) and
the waits themselves, so it is an upper bound that the GPU benchmark (run_gpu_checks.sh) measures.

The choice: a placement that runs more submodels beats one that runs fewer (elastic budget control
needs the parent), then the higher geometric mean of the expected tok/s over the submodels it runs;
without bandwidths, the fewer bytes the CPU reads per token, summed over the submodels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..cache import cache_bytes
from ..checkpoint.config import MOE, ModelConfig
from ..checkpoint.submodels import Submodel
from ..checkpoint.weights import EMBED_NAMES
from ..placement import ExpertPlacement, experts_within
from ..units import format_bytes
from .hardware import HardwareProbe

FITS, TIGHT, NO = "fits", "tight", "does not fit"
RANK = {FITS: 2, TIGHT: 1, NO: 0}


@dataclass(frozen=True)
class SubmodelSpeed:
    name: str
    device_read_bytes: int  # weights one decode step reads on the GPU
    host_read_bytes: int  # weights it reads in RAM (the CPU computes those experts)
    tokens_per_s: float | None  # the bandwidth bound; None when the probe has no bandwidths


@dataclass(frozen=True)
class PlacementFit:
    placement: str  # ExpertPlacement.spec ("none": the plain split, with `resident` alone on the card)
    resident: str  # the submodel whose weights are loaded
    device_bytes: int  # weights on the GPU
    host_bytes: int  # routed experts in RAM (pages of the file)
    cache_bytes: int
    workspace_bytes: int
    verdict: str
    reason: str
    speeds: tuple[SubmodelSpeed, ...]  # the submodels it runs, parent first

    @property
    def need_bytes(self) -> int:
        """GPU memory: weights there, caches and workspace."""
        return self.device_bytes + self.cache_bytes + self.workspace_bytes

    def score(self) -> tuple:
        rates = [s.tokens_per_s for s in self.speeds]
        if rates and all(r for r in rates):
            return (len(rates), math.exp(sum(math.log(r) for r in rates) / len(rates)))
        return (len(rates), -sum(s.host_read_bytes for s in self.speeds))


class Sizes:
    """Each submodel's weights on the GPU, from per-tensor bytes (`sizes(sub)` -> {name: bytes}), grouped
    into what the placements move: routed experts per layer, the rest, and the embedding table."""

    def __init__(self, cfg: ModelConfig, sizes):
        self.cfg, self.sizes, self.cached = cfg, sizes, {}

    def _grouped(self, sub: Submodel) -> tuple[dict[int, int], int, int]:
        if sub.name not in self.cached:
            experts, rest, table = {}, 0, 0
            for name, n in self.sizes(sub).items():
                if ".mixer.experts." in name:
                    layer = int(name.split(".")[2])
                    experts[layer] = experts.get(layer, 0) + n
                else:
                    rest += n
                    table += n if name in EMBED_NAMES else 0
            self.cached[sub.name] = experts, rest, table
        return self.cached[sub.name]

    def experts(self, sub: Submodel, layer: int) -> int:
        """Bytes of `sub`'s routed experts in `layer` (scales included)."""
        return self._grouped(sub)[0].get(layer, 0)

    def rest(self, sub: Submodel) -> int:
        """Bytes of everything but the routed experts."""
        return self._grouped(sub)[1]

    def step_reads(self, sub: Submodel) -> tuple[int, dict[int, int]]:
        """What one decode step reads: the rest (one row of the embedding table) and, per MoE layer,
        the k chosen experts' bytes."""
        experts, rest, table = self._grouped(sub)
        k = self.cfg.num_experts_per_tok
        return (rest - table + table // self.cfg.vocab_size,
                {i: n * k // max(1, sub.n_routed_experts[i]) for i, n in experts.items()})


def plan_placements(cfg: ModelConfig, subs: list[Submodel], sizes: Sizes, probe: HardwareProbe, context: int,
                    plain: str | None, workspace: int, fits_share: float,
                    asked: ExpertPlacement | None = None) -> tuple[PlacementFit, ...]:
    """Every candidate placement (module doc), best first; the plain split (resident `plain`) among them.
    With `asked`, that placement alone."""
    gpu = probe.gpu
    parent = subs[0]
    moe = cfg.layers_of(MOE)

    def fit(placement: ExpertPlacement, resident: Submodel, runs: list[Submodel]) -> PlacementFit:
        host = placement.on_host(cfg) if placement.active else frozenset()
        kept = placement.kept(subs)
        device = sizes.rest(resident) + sum(sizes.experts(resident, i) for i in moe if i not in host)
        device += sum(sizes.experts(kept, i) for i in moe) if kept is not None else 0
        in_ram = sum(sizes.experts(resident, i) for i in host)
        cache = cache_bytes(cfg, resident, context, 2)
        need, free = device + cache + workspace, gpu.free_bytes
        verdict = FITS if need <= fits_share * free else TIGHT if need <= free else NO
        if verdict != NO and in_ram > fits_share * probe.ram_available_bytes:
            verdict = TIGHT  # experts' pages reread from disk: it runs, slower
        speeds = tuple(_speed(cfg, s, sizes, host, kept, gpu.memory_bandwidth_bytes_per_s,
                              probe.ram_read_bytes_per_s) for s in runs)
        return PlacementFit(placement.spec, resident.name, device, in_ram, cache, workspace, verdict,
                            _reason(placement, device, in_ram, cache, workspace, free, probe, speeds),
                            speeds)

    if asked is not None:
        return (fit(asked, parent, subs),)
    candidates = [fit(ExpertPlacement(None), parent, subs)]
    for n in range(1, len(moe)):
        layered = fit(ExpertPlacement(n), parent, subs)
        if layered.verdict == FITS:
            candidates.append(layered)
            break
    candidates += [fit(ExpertPlacement(None, s.name), parent, subs) for s in subs[1:] if s.fits_within(parent)]
    if plain is not None:
        resident = next(s for s in subs if s.name == plain)
        candidates.append(fit(ExpertPlacement(), resident, [s for s in subs if s.fits_within(resident)]))
    usable = [p for p in candidates if p.verdict != NO]
    ranked = sorted(usable, key=lambda p: (p.score(), RANK[p.verdict]), reverse=True)
    return tuple(ranked + [p for p in candidates if p.verdict == NO])


def _speed(cfg: ModelConfig, sub: Submodel, sizes: Sizes, host: frozenset[int], kept: Submodel | None,
           gpu_bw: int, ram_bw: int) -> SubmodelSpeed:
    rest, experts = sizes.step_reads(sub)
    in_ram = {i for i in host if kept is None or not experts_within(sub, kept, i)}
    device = rest + sum(n for i, n in experts.items() if i not in in_ram)
    ram = sum(n for i, n in experts.items() if i in in_ram)
    rate = None
    if gpu_bw > 0 and (ram == 0 or ram_bw > 0):
        rate = 1 / (device / gpu_bw + (ram / ram_bw if ram else 0))
    return SubmodelSpeed(sub.name, device, ram, rate)


def _gb(n: float) -> str:
    return format_bytes(n, "GiB")


def _reason(placement: ExpertPlacement, device: int, in_ram: int, cache: int, workspace: int,
            free: int, probe: HardwareProbe, speeds: tuple[SubmodelSpeed, ...]) -> str:
    what = {"none": "on the GPU alone", "all": "every layer's routed experts in RAM"}.get(
        placement.spec, f"{placement.keep}'s experts on the GPU, the rest in RAM" if placement.keep
        else f"the first {placement.host_layers} MoE layers' routed experts in RAM")
    ram = f" + {_gb(in_ram)} in RAM ({_gb(probe.ram_available_bytes)} available)" if in_ram else ""
    known = all(s.tokens_per_s is not None for s in speeds)
    rates = ", ".join(f"{s.name} {_rate(s)}" for s in speeds)
    return (f"{what}: GPU {_gb(device + cache + workspace)} of {_gb(free)} free ({_gb(device)} weights + "
            f"{_gb(cache)} cache + {_gb(workspace)} workspace){ram}; "
            + (f"expected {rates}" if known else f"a token reads {rates} (no tok/s: the probe has no bandwidths)"))


def _rate(s: SubmodelSpeed) -> str:
    reads = f"{s.device_read_bytes / 1e9:.2f} GB on the GPU" + \
        (f" + {s.host_read_bytes / 1e9:.2f} GB in RAM" if s.host_read_bytes else "")
    return reads if s.tokens_per_s is None else f"{s.tokens_per_s:.0f} tok/s ({reads} a token)"
