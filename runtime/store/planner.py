"""Will it fit? For each checkpoint variant and each submodel: the memory it needs on this GPU,
a verdict (fits / tight / does not fit) with a one-line reason, and the compute path that
would run. Then the default variant to offer.

Memory needed to make a submodel the resident copy = its weights (smaller submodels are views
of it, free) + its caches at the chosen context + a fixed workspace. A checkpoint on disk is sized
from its own safetensors headers, tensor by tensor, exactly as the loader holds it (load.py:
packed linears as stored, routers and Mamba A/D/dt_bias fp32, the rest in the compute dtype:
BF16 on a GPU, the CPU's choice from device.py on the CPU); a catalog variant not downloaded yet
is estimated from its config: packed NVFP4 linears at 0.5625 bytes per parameter, FP8 at 1,
routers fp32, the rest BF16. Free memory is read at decision time and already excludes what
other programs hold. Without a GPU a checkpoint on disk is planned for the CPU's RAM (the bundled
demo always is), and loading it on the CPU refuses what does not fit (`check_cpu_fit`).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from pathlib import Path

from ..cache import cache_bytes
from ..checkpoint.config import ModelConfig, count_params
from ..checkpoint.submodel_table import ESTIMATED, VERIFIED, SubmodelTable
from ..checkpoint.submodels import Submodel
from ..checkpoint.weights import EMBED_NAMES, expected_tensors, is_linear
from ..errors import UsageError
from ..options import CONTEXT
from ..placement import NONE, ExpertPlacement
from ..units import GiB, format_bytes
from .catalog import Catalog, Variant, bf16_modules
from .hardware import HardwareProbe
from .placement_plan import PlacementFit, Sizes, plan_placements
from .submodel_tables import submodel_table

WORKSPACE_BYTES = GiB  # CUDA context, prefill activations, allocator slack
CPU_WORKSPACE_BYTES = GiB // 2  # the Python process with torch loaded, prefill activations, decode buffers
FITS_SHARE = 0.9  # "fits" leaves 10% of free memory; up to 100% is "tight"
DISK_MARGIN_BYTES = 2 * GiB
FITS, TIGHT, NO = "fits", "tight", "does not fit"
PACKED_BYTES = {"NVFP4": 0.5 + 1 / 16, "FP8": 1.0}


@dataclass(frozen=True)
class SubmodelFit:
    name: str
    params: int
    active_params: int
    weight_bytes: int
    cache_bytes: int
    workspace_bytes: int
    verdict: str
    reason: str
    state: str = VERIFIED  # verified, declared or estimated widths (checkpoint/submodel_table.py)
    mapped_bytes: int = 0  # CPU: of weight_bytes, views of the file (file-backed pages the OS can drop and reread)

    @property
    def need_bytes(self) -> int:
        return self.weight_bytes + self.cache_bytes + self.workspace_bytes

    @property
    def private_bytes(self) -> int:
        """What the process must hold itself (anonymous memory): copies, caches and workspace."""
        return self.need_bytes - self.mapped_bytes


@dataclass(frozen=True)
class VariantPlan:
    variant: str  # catalog id
    title: str
    format: str
    compute_path: str
    download_bytes: int | None
    disk_ok: bool
    disk_reason: str
    submodels: tuple[SubmodelFit, ...]  # parent first
    resident: str | None  # the largest submodel that fits: the one copy to load
    # When the parent does not fit the GPU: routed experts in RAM (store/placement_plan.py), best first,
    # the plain split among them, and the one proposed (None: the plain split, or nothing fits).
    placements: tuple[PlacementFit, ...] = ()
    placement: str | None = None

    @property
    def verdict(self) -> str:
        return self.submodels[0].verdict if self.submodels else NO

    def proposed(self) -> PlacementFit | None:
        """The proposed placement's plan (None when none is proposed)."""
        return next((p for p in self.placements if p.placement == self.placement), None)


@dataclass(frozen=True)
class Plan:
    hardware: str
    context: int
    variants: tuple[VariantPlan, ...]
    default: str  # variant id
    default_reason: str

    def variant(self, vid: str) -> VariantPlan:
        return next(v for v in self.variants if v.variant == vid)


def weight_bytes(cfg: ModelConfig, sub: Submodel, packed_format) -> int:
    """Bytes of a submodel's weights on the GPU. `packed_format(tensor name)` says whether a
    linear weight is stored "NVFP4", "FP8" or dense (None)."""
    return sum(tensor_bytes(cfg, sub, packed_format).values())


def tensor_bytes(cfg: ModelConfig, sub: Submodel, packed_format) -> dict[str, int]:
    """`weight_bytes` tensor by tensor (the estimate for a catalog variant not on disk)."""
    out = {}
    for name, shape in expected_tensors(cfg, sub).items():
        n = 1
        for d in shape:
            n *= d
        fmt = packed_format(name) if is_linear(name) else None
        if fmt:
            out[name] = int(n * PACKED_BYTES[fmt]) + 8  # plus the per-matrix scales
        elif ".gate." in name:  # routers stay fp32
            out[name] = 4 * n
        else:
            out[name] = 2 * n
    return out


def catalog_packing(variant: Variant, cfg: ModelConfig):
    """Which linears a catalog variant stores packed (NVIDIA's exclusions stay BF16)."""
    if variant.format not in PACKED_BYTES:
        return lambda name: None
    excluded = bf16_modules(cfg)

    def fmt(name: str):
        module = name.removesuffix(".weight")
        return None if any(fnmatch.fnmatchcase(module, p) for p in excluded) else variant.format
    return fmt


class HeaderSizing:
    """A checkpoint on disk, sized from its headers: which linears are packed (called with a tensor
    name, as a catalog variant's packing is), and every submodel's resident bytes as loaded."""

    def __init__(self, cfg: ModelConfig, table):
        self.cfg, self.table = cfg, table

    def __call__(self, name: str):
        if name + "_scale" not in self.table:
            return None
        return "NVFP4" if self.table[name].dtype == "U8" else "FP8"

    def stored_bf16_bytes(self) -> int:
        return sum(info.nbytes for name, info in self.table.items()
                   if info.dtype == "BF16" and not (is_linear(name) and name + "_scale" in self.table))

    def dtype(self, on_cpu: bool):
        """The compute dtype loading picks (device.pick_device's automatic choice)."""
        from ..device import pick_device

        return pick_device("cpu", None, self.stored_bf16_bytes())[1] if on_cpu else torch_bf16()

    def narrow(self, on_cpu: bool) -> bool:
        """Whether loading keeps BF16 linears and embeddings as stored under an fp32 compute dtype."""
        from ..device import keeps_narrow

        return on_cpu and keeps_narrow("cpu", self.dtype(True), self.stored_bf16_bytes())

    def held(self, sub: Submodel, on_cpu: bool):
        """Each tensor as loading holds it (load.py `held_tensors`): its bytes, and whether a view of the file."""
        from ..checkpoint.load import held_tensors

        return list(held_tensors(self.cfg, self.table, sub, self.dtype(on_cpu), self.narrow(on_cpu),
                                 "cpu" if on_cpu else "cuda"))

    def weight_bytes(self, sub: Submodel, on_cpu: bool) -> int:
        return sum(t.nbytes for t in self.held(sub, on_cpu))


def torch_bf16():
    import torch

    return torch.bfloat16


def checkpoint_sizing(folder):
    """Config, submodels, packing (a HeaderSizing) and submodel states of a checkpoint on disk (headers only)."""
    from ..checkpoint.config import read_json
    from ..checkpoint.safetensors_io import tensor_table
    from ..checkpoint.submodels import load_elastic

    raw = read_json(folder / "config.json")
    cfg = ModelConfig.from_dict(raw, folder / "config.json")
    table = tensor_table(folder)
    states = submodel_table(folder, cfg)
    return cfg, load_elastic(folder, cfg, states.elastic), HeaderSizing(cfg, table), states


FORMAT_PATHS = {"NVFP4": ("NVFP4 native matmul", (10, 0), "NVFP4 weight-only dequantize"),
                "FP8": ("FP8 scaled matmul", (8, 9), "FP8 weight-only dequantize")}


def local_variant(folder, cfg: ModelConfig, packing) -> Variant:
    """A Variant for a checkpoint that is not in the catalog (an imported folder)."""
    formats = {packing(name) for name in expected_tensors(cfg) if is_linear(name)} - {None}
    fmt = formats.pop() if formats else "BF16"
    fast, cc, fallback = FORMAT_PATHS.get(fmt, ("BF16 matmul", (8, 0), "BF16 matmul"))
    return Variant(id=str(folder), title=str(folder), format=fmt, repo=None, path=None, approx_size_bytes=None,
                   licence={}, fast_path=fast, fast_min_cc=cc, fallback_path=fallback, family=None)


def plan_checkpoint(folder, probe: HardwareProbe, context: int, placement: str | None = None) -> VariantPlan:
    """Plans a checkpoint on disk, sized from its own files (for the CPU's RAM when there is no GPU)."""
    cfg, subs, packing, states = checkpoint_sizing(Path(folder))
    return plan_variant(local_variant(folder, cfg, packing), cfg, subs, probe, context, packing, states=states,
                        placement=placement)


def check_cpu_fit(folder, context: int, resident: str | None = None, probe: HardwareProbe | None = None) -> SubmodelFit:
    """Before a CPU load: the plan of the submodel to make resident (default the parent) in this
    machine's available RAM. Raises UsageError with the plan's numbers when it does not fit."""
    if probe is None:  # RAM is all a CPU load needs to know (no GPU query, no disk)
        import psutil

        vm = psutil.virtual_memory()
        probe = HardwareProbe((), int(vm.total), int(vm.available), 0, "the CPU was asked for")
    cfg, subs, packing, _ = checkpoint_sizing(Path(folder))
    fits = [fit_submodel(cfg, s, packing, probe, context, on_cpu=True) for s in subs]
    fit = next((f for f in fits if f.name == resident), fits[0]) if resident else fits[0]
    if fit.verdict == NO:
        smaller = next((f.name for f in fits if f.verdict != NO), None)
        hint = f"; the largest submodel that fits is {smaller}" if smaller and smaller != fit.name else ""
        raise UsageError(f"this checkpoint does not fit this machine's memory: {fit.reason}{hint}; close other "
                         "programs, use a shorter context, or run it on a GPU")
    return fit


def compute_path(variant: Variant, probe: HardwareProbe, on_disk: bool = False) -> str:
    if variant.bundled:
        return "CPU demo"
    gpu = probe.gpu
    if gpu is None and on_disk:
        return "CPU" + (f": {variant.format} weights decoded by byte table" if variant.format in PACKED_BYTES else "")
    if gpu is None:
        return "none: needs an NVIDIA GPU"
    return variant.fast_path if gpu.compute_capability >= variant.fast_min_cc else variant.fallback_path


def _gb(n: float) -> str:
    return format_bytes(n, "GiB")  # one unit within a line, so the figures compare at a glance


def fit_submodel(cfg: ModelConfig, sub: Submodel, packing, probe: HardwareProbe, context: int,
                 on_cpu: bool = False) -> SubmodelFit:
    sized = isinstance(packing, HeaderSizing)
    ctx = f"{context // 1024}k" if context >= 1024 else str(context)
    if on_cpu and sized:
        return _fit_ram(cfg, sub, packing, probe, context, ctx)
    n = count_params(cfg, sub)
    w = packing.weight_bytes(sub, on_cpu) if sized else weight_bytes(cfg, sub, packing)
    if on_cpu:  # the bundled demo from its config: an estimate, fp32 on the CPU (twice the BF16 figure)
        w *= 2
        c = cache_bytes(cfg, sub, context, 4)
        need, free = w + c + CPU_WORKSPACE_BYTES, probe.ram_available_bytes
        verdict = FITS if need <= FITS_SHARE * free else TIGHT if need <= free else NO
        parts = f"{_gb(w)} weights + {_gb(c)} cache at {ctx} context + {_gb(CPU_WORKSPACE_BYTES)} workspace"
        reason = f"{sub.name} {verdict} in RAM: needs {_gb(need)} ({parts}), {_gb(free)} available"
        return SubmodelFit(sub.name, n.total, n.active, w, c, CPU_WORKSPACE_BYTES, verdict, reason)
    c = cache_bytes(cfg, sub, context, 2)
    gpu = probe.gpu
    if gpu is None:
        return SubmodelFit(sub.name, n.total, n.active, w, c, WORKSPACE_BYTES, NO,
                           f"{sub.name} does not fit: no NVIDIA GPU ({probe.no_gpu_reason}); "
                           "the demo model runs on the CPU")
    need, free = w + c + WORKSPACE_BYTES, gpu.free_bytes
    parts = f"{_gb(w)} weights + {_gb(c)} cache at {ctx} context + {_gb(WORKSPACE_BYTES)} workspace"
    others = f"; other programs hold {_gb(gpu.used_by_others_bytes)}" if gpu.used_by_others_bytes >= GiB else ""
    if need <= FITS_SHARE * free:
        verdict, reason = FITS, f"{sub.name} fits: {_gb(free)} free, needs {parts}"
    elif need <= free:
        verdict, reason = TIGHT, (f"{sub.name} is tight: needs {_gb(need)} of {_gb(free)} free ({parts}); "
                                  f"close other GPU programs or lower the context{others}")
    else:
        verdict, reason = NO, f"{sub.name} does not fit: needs {_gb(need)} ({parts}), {_gb(free)} free{others}"
    return SubmodelFit(sub.name, n.total, n.active, w, c, WORKSPACE_BYTES, verdict, reason)


def _fit_ram(cfg: ModelConfig, sub: Submodel, sizing: HeaderSizing, probe: HardwareProbe, context: int,
             ctx: str) -> SubmodelFit:
    """A checkpoint on disk in this machine's RAM, private and file-backed memory planned apart: what the
    loader copies (and the cache and workspace) must fit the available RAM; the weights it keeps as views
    of the file are pages the OS can drop and read again, so they only decide whether everything stays
    cached (fits) or some pages are reread from disk (tight). Refused (does not fit) only when the
    private memory and the file's pages every token reads do not fit together."""
    n = count_params(cfg, sub)
    held = sizing.held(sub, True)
    w = sum(t.nbytes for t in held)
    mapped = sum(t.nbytes for t in held if t.mapped)
    hot = sum(t.nbytes for t in held if t.mapped and ".experts." not in t.name and t.name not in EMBED_NAMES)
    c = cache_bytes(cfg, sub, context, sizing.dtype(True).itemsize)
    private, free = w - mapped + c + CPU_WORKSPACE_BYTES, probe.ram_available_bytes
    verdict = FITS if private + mapped <= FITS_SHARE * free else TIGHT if private + hot <= free else NO
    parts = (f"{_gb(private)} private ({_gb(w - mapped)} weights copied + {_gb(c)} cache at {ctx} context + "
             f"{_gb(CPU_WORKSPACE_BYTES)} workspace) + {_gb(mapped)} of weights read from the file (pages the OS "
             "can drop and reread)")
    if verdict == FITS:
        reason = f"{sub.name} fits in RAM: {parts}, {_gb(free)} available"
    elif verdict == TIGHT:
        reason = (f"{sub.name} is tight in RAM: {parts}, {_gb(free)} available: the OS will drop some of the "
                  "file's pages and read them again from disk, so decoding may wait for the disk")
    else:
        reason = (f"{sub.name} does not fit in RAM: needs {_gb(private)} private and the {_gb(hot)} of the file "
                  f"every token reads ({parts}), {_gb(free)} available")
    return SubmodelFit(sub.name, n.total, n.active, w, c, CPU_WORKSPACE_BYTES, verdict, reason, mapped_bytes=mapped)


def plan_variant(variant: Variant, cfg: ModelConfig, subs: list[Submodel], probe: HardwareProbe, context: int,
                 packing=None, download_bytes: int | None = None, states: SubmodelTable | None = None,
                 placement: str | None = None) -> VariantPlan:
    """Plans one variant; on a GPU that cannot hold the parent, also its placements of experts in RAM
    (or, with `placement`, that one placement whether the parent fits or not: `--cpu-experts`)."""
    packing = packing or catalog_packing(variant, cfg)
    on_cpu = variant.bundled or (probe.gpu is None and isinstance(packing, HeaderSizing))
    fits = tuple(_with_state(fit_submodel(cfg, s, packing, probe, context, on_cpu=on_cpu), states)
                 for s in subs)
    resident = next((f.name for f in fits if f.verdict in (FITS, TIGHT)), None)
    size = download_bytes if download_bytes is not None else (0 if variant.bundled else variant.approx_size_bytes)
    disk_ok, disk_reason = True, ""
    if size:
        disk_ok = probe.disk_free_bytes >= size + DISK_MARGIN_BYTES
        disk_reason = (f"download {_gb(size)}, {format_bytes(probe.disk_free_bytes, 'GiB', 0)} free on disk"
                       + ("" if disk_ok else ": not enough space"))
    placements, asked = (), ExpertPlacement.parse(placement) if placement else None
    if not on_cpu and probe.gpu is not None and fits and (fits[0].verdict == NO or asked is not None):
        gpu_sizes = Sizes(cfg, (lambda s: {t.name: t.nbytes for t in packing.held(s, False)})
                          if isinstance(packing, HeaderSizing) else (lambda s: tensor_bytes(cfg, s, packing)))
        placements = plan_placements(cfg, subs, gpu_sizes, probe, context, resident, WORKSPACE_BYTES, FITS_SHARE,
                                     asked)
    best = next((p for p in placements if p.verdict != NO), None)
    placement = best.placement if best is not None and best.placement != NONE else None
    return VariantPlan(variant.id, variant.title, variant.format,
                       compute_path(variant, probe, isinstance(packing, HeaderSizing)), size, disk_ok,
                       disk_reason, fits, resident, placements, placement)


def _with_state(fit: SubmodelFit, states: SubmodelTable | None) -> SubmodelFit:
    if states is None:
        return fit
    state = states.state(fit.name)
    reason = fit.reason + ("; widths estimated, not verified" if state == ESTIMATED else "")
    return replace(fit, state=state, reason=reason)


def make_plan(probe: HardwareProbe, catalog: Catalog, context: int = CONTEXT.default,
              local: dict | None = None, placement: str | None = None) -> Plan:
    """Plans every catalog variant. `local` maps variant ids to (config, submodels, packing) of
    checkpoints already on disk, which replace the catalog's estimates; `placement`: as for plan_variant."""
    local = local or {}
    plans = []
    for v in catalog.variants:
        if v.id in local:
            cfg, subs, packing, states = local[v.id]
        elif v.family:
            fam = catalog.families[v.family]
            cfg, subs, packing = fam.config, list(fam.submodels), None
            states = SubmodelTable(fam.elastic, {s.name: VERIFIED if i == 0 else ESTIMATED
                                                 for i, s in enumerate(fam.submodels)}, "the catalog's estimate")
        elif v.bundled and v.path.exists():
            cfg, subs, packing, states = checkpoint_sizing(v.path)
        else:
            continue
        plans.append(plan_variant(v, cfg, subs, probe, context, packing, states=states,
                                  placement=None if v.bundled else placement))
    default, why = choose_default(probe, plans, catalog)
    return Plan(probe.summary(), context, tuple(plans), default, why)


def choose_default(probe: HardwareProbe, plans: list[VariantPlan], catalog: Catalog) -> tuple[str, str]:
    by_format = {p.format: p for p in plans if not catalog.variant(p.variant).bundled}
    demo = next((p for p in plans if catalog.variant(p.variant).bundled), None)
    demo_id = demo.variant if demo else "demo"
    gpu = probe.gpu
    if gpu is None:
        return demo_id, f"No NVIDIA GPU ({probe.no_gpu_reason}): the bundled demo model runs on the CPU."
    cc = gpu.compute_capability
    nvfp4, fp8 = by_format.get("NVFP4"), by_format.get("FP8")
    if fp8 and (8, 9) <= cc < (10, 0) and fp8.verdict == FITS:
        return fp8.variant, (f"{gpu.architecture} GPU runs FP8 natively and the FP8 30B fits "
                             f"({_gb(fp8.submodels[0].need_bytes)} of {_gb(gpu.free_bytes)} free).")
    if nvfp4 and nvfp4.resident:
        how = "natively" if cc >= (10, 0) else "through a weight-only dequantizing path"
        which = ("all submodels fit" if nvfp4.resident == nvfp4.submodels[0].name
                 else f"the largest that fits is {nvfp4.resident}")
        if nvfp4.placement is not None:
            which += f"; with routed experts in RAM (--cpu-experts {nvfp4.placement}) every submodel runs"
        return nvfp4.variant, f"NVFP4 is the smallest download and runs {how} on this {gpu.architecture} GPU; {which}."
    return demo_id, (f"None of the 30B family fits in {_gb(gpu.free_bytes)} of free GPU memory: the bundled demo "
                     "model runs on the CPU.")
