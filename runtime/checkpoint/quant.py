"""Quantized weights that stay packed in memory: NVFP4 and FP8, as ModelOpt exports them.

NVFP4: a weight of logical shape (..., out, in) is stored as
    packed   uint8          (..., out, in/2)   two E2M1 codes per byte, low nibble first
    scale    float8_e4m3fn  (..., out, in/16)  one scale per block of 16 inputs
    scale2   float32        (...)              one global scale per matrix
and value = e2m1(code) * scale * scale2 (about 0.5625 bytes per parameter).
FP8: `weight` float8_e4m3fn (..., out, in) and one fp32 `scale` per matrix.

Both classes index like the tensor they stand for, so the nesting code in weights.py slices
them exactly as it slices dense tensors: rows freely, input columns only in whole 16-wide
blocks for NVFP4 (anything else is a clear error naming the layer). Slices are views.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import CheckpointError, UsageError, show

BLOCK = 16
# E2M1 code -> value: sign bit 3, then magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 (code 8, "-0", reads as 0).
E2M1_VALUES = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)


_BYTE_VALUES: dict[str, torch.Tensor] = {}


def _byte_values(device) -> torch.Tensor:
    """(256, 2): the two E2M1 values every packed byte holds, low nibble first (one gather per weight)."""
    key = str(device)
    if key not in _BYTE_VALUES:
        byte = torch.arange(256)
        _BYTE_VALUES[key] = torch.stack([E2M1_VALUES[byte & 0x0F], E2M1_VALUES[byte >> 4]], dim=1).to(device)
    return _BYTE_VALUES[key]


def _split_index(index, ndim: int) -> tuple:
    """Normalises a tensor index into one entry per dimension (slices or an index tensor first)."""
    if not isinstance(index, tuple):
        index = (index,)
    return index + (slice(None),) * (ndim - len(index))


class _Packed:
    """What a packed weight answers as a tensor would (the loader and the views ask these); its first
    tensor holds the values, laid out as the weight is."""

    def tensors(self) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    @property
    def ndim(self) -> int:
        return self.tensors()[0].dim()

    def dim(self) -> int:
        return self.ndim

    @property
    def device(self) -> torch.device:
        return self.tensors()[0].device

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors())


@dataclass
class PackedNVFP4(_Packed):
    packed: torch.Tensor
    scale: torch.Tensor
    scale2: torch.Tensor
    name: str = ""  # the checkpoint tensor it came from, for error messages

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.packed.shape[:-1], self.packed.shape[-1] * 2))

    def tensors(self):
        return (self.packed, self.scale, self.scale2)

    def to(self, device) -> "PackedNVFP4":
        return PackedNVFP4(self.packed.to(device), self.scale.to(device), self.scale2.to(device), self.name)

    def __getitem__(self, index) -> "PackedNVFP4":
        idx = _split_index(index, self.ndim)
        *lead, rows, cols = idx
        cols = block_slice(cols, self.shape[-1], self.name)
        packed = self.packed[(*lead, rows, slice(cols.start // 2, cols.stop // 2))]
        scale = self.scale[(*lead, rows, slice(cols.start // BLOCK, cols.stop // BLOCK))]
        scale2 = self.scale2[tuple(lead)] if lead else self.scale2
        return PackedNVFP4(packed, scale, scale2, self.name)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The exact values: e2m1 * block scale * global scale, computed in fp32."""
        values = _byte_values(self.device)[self.packed.long()].flatten(-2)  # (..., out, in)
        scales = self.scale.float() * self.scale2.float()[(...,) + (None,) * 2]  # (..., out, in/16)
        values = values.unflatten(-1, (-1, BLOCK)) * scales[..., None]
        return values.flatten(-2).to(dtype)


@dataclass
class PackedFP8(_Packed):
    weight: torch.Tensor  # float8_e4m3fn (..., out, in)
    scale: torch.Tensor  # fp32 (...), one per matrix
    name: str = ""

    @property
    def shape(self) -> torch.Size:
        return self.weight.shape

    def tensors(self):
        return (self.weight, self.scale)

    def to(self, device) -> "PackedFP8":
        return PackedFP8(self.weight.to(device), self.scale.to(device), self.name)

    def __getitem__(self, index) -> "PackedFP8":
        idx = _split_index(index, self.ndim)
        lead = idx[:-2]
        return PackedFP8(self.weight[idx], self.scale[tuple(lead)] if lead else self.scale, self.name)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return (self.weight.float() * self.scale.float()[(...,) + (None,) * 2]).to(dtype)


Packed = PackedNVFP4 | PackedFP8


def block_slice(cols, width: int, name: str) -> slice:
    """Column slices of NVFP4 weights must cover whole 16-input blocks."""
    if not isinstance(cols, slice) or cols.step not in (None, 1):
        raise TypeError("packed NVFP4 weights slice their input side with plain slices only")
    start, stop, _ = cols.indices(width)
    if start % BLOCK or stop % BLOCK:
        raise CheckpointError(
            name or "NVFP4 weight",
            f"a submodel keeps {stop - start} of its {width} input columns, which breaks NVFP4's "
            f"{BLOCK}-wide scale blocks; nested widths must be multiples of {BLOCK} in NVFP4 checkpoints")
    return slice(start, stop)


def dense(w, dtype: torch.dtype) -> torch.Tensor:
    """A plain tensor for `w` (dequantizing a packed weight)."""
    return w if isinstance(w, torch.Tensor) else w.dequantize(dtype)


# ----------------------------------------------------------------------------- stacking experts

def stack(ws: list):
    """Stacks same-shaped 2-D weights (experts) into one (E, out, in) weight."""
    first = ws[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(ws)
    if isinstance(first, PackedNVFP4):
        return PackedNVFP4(torch.stack([w.packed for w in ws]), torch.stack([w.scale for w in ws]),
                           torch.stack([w.scale2.reshape(()) for w in ws]), first.name.replace(".0.", ".*."))
    return PackedFP8(torch.stack([w.weight for w in ws]), torch.stack([w.scale.reshape(()) for w in ws]),
                     first.name.replace(".0.", ".*."))


# ----------------------------------------------------------------------------- the checkpoint's quant config

@dataclass(frozen=True)
class QuantSpec:
    algo: str  # "NVFP4" or "FP8": the format of the packed linears (the commonest one in a mixed export)
    group_size: int
    exclude: tuple[str, ...]  # module name patterns (fnmatch) that stay unquantized
    # MIXED_PRECISION exports: module -> its format; a module not listed stays unquantized
    layers: dict[str, str] | None = field(default=None, compare=False)

    def excludes(self, module: str) -> bool:
        return self.format_of(module) is None

    def format_of(self, module: str) -> str | None:
        """The format a linear `module` is stored in by this config, None when it stays unquantized."""
        import fnmatch

        if any(module == p or fnmatch.fnmatchcase(module, p) or fnmatch.fnmatchcase(module, p + ".*")
               for p in self.exclude):
            return None
        if self.layers is None:
            return self.algo
        return self.layers.get(module)

    @property
    def formats(self) -> tuple[str, ...]:
        """Every format the packed linears use, commonest first."""
        if self.layers is None:
            return (self.algo,)
        counts = {}
        for fmt in self.layers.values():
            counts[fmt] = counts.get(fmt, 0) + 1
        return tuple(sorted(counts, key=lambda f: -counts[f]))


SUPPORTED_ALGOS = ("NVFP4", "FP8")
MIXED = "MIXED_PRECISION"
MAX_MODULES = 100_000


def repair_exclude_name(name: str) -> str:
    """ModelOpt (0.4x) appends a sentinel segment ".\\0modelopt_name_sentinel" while renaming
    exclude names, and for NemotronH its own "model." -> "backbone." rule hits the "modelo" in it,
    leaving e.g. "lm_head.\\0backbone.pt_name_sentinel". Cut any such segment, keep a wildcard suffix."""
    cut = name.find(".\x00")
    if cut < 0:
        return name
    end = name.find("name_sentinel", cut)
    return name[:cut] + (name[end + len("name_sentinel"):] if end >= 0 else "")


def read_quant_spec(folder, config: dict) -> QuantSpec | None:
    """The quantization of a ModelOpt export: hf_quant_config.json, else config.json's
    quantization_config; None for a dense checkpoint. Every field is type-checked."""
    from pathlib import Path

    from .config import read_json

    path = Path(folder) / "hf_quant_config.json"
    return parse_quant_spec(read_json(path) if path.exists() else None, config, path, Path(folder) / "config.json")



def parse_quant_spec(hf_quant: dict | None, config: dict, hf_path, config_path) -> QuantSpec | None:
    """`read_quant_spec` for files already read (a folder's, or a hub repo's): hf_quant_config.json's
    object (or None when there is none) and config.json's; the paths name them in errors.

    Both ModelOpt forms are read: one `quant_algo` (NVFP4 or FP8) with `exclude_modules`, and
    `MIXED_PRECISION` with a `quantized_layers` map giving each quantized module its own format."""
    if hf_quant is not None:
        q = hf_quant.get("quantization")
        where = hf_path
        if not isinstance(q, dict):
            raise CheckpointError(hf_path, "has no 'quantization' object")
        exclude = q.get("exclude_modules")
    elif config.get("quantization_config") is not None:
        q, where = config["quantization_config"], config_path
        if not isinstance(q, dict):
            raise CheckpointError(where, "quantization_config must be an object")
        exclude = q.get("exclude_modules") if q.get("exclude_modules") is not None else q.get("ignore")
    else:
        return None
    algo = q.get("quant_algo")
    exclude = [] if exclude is None else exclude
    if not isinstance(exclude, list) or len(exclude) > MAX_MODULES or not all(isinstance(e, str) for e in exclude):
        raise CheckpointError(where, "exclude_modules must be a list of module names (strings)")
    exclude = tuple(repair_exclude_name(e) for e in exclude)
    if algo == MIXED:
        layers = _quantized_layers(q.get("quantized_layers"), where)
        formats = QuantSpec("", BLOCK, (), layers).formats
        return QuantSpec(formats[0] if formats else SUPPORTED_ALGOS[0], BLOCK, exclude, layers)
    if algo not in SUPPORTED_ALGOS:
        raise CheckpointError(where, f"quantization {show(algo, 40)} is not supported; Elastic Chat reads "
                                     f"{' and '.join(SUPPORTED_ALGOS)} ModelOpt exports (also mixed per layer) "
                                     "and BF16 checkpoints")
    group = _group_size(q, algo, where)
    return QuantSpec(algo, group, exclude)


def _group_size(q: dict, algo: str, where, module: str | None = None) -> int:
    group = q.get("group_size")
    group = BLOCK if group is None else group
    named = f" (module {show(module, 40)})" if module else ""
    if not isinstance(group, int) or isinstance(group, bool):
        raise CheckpointError(where, f"group_size must be a whole number{named}")
    if algo == "NVFP4" and group != BLOCK:
        raise CheckpointError(where, f"NVFP4 group_size {group} is not supported (only {BLOCK}){named}")
    return group


def _quantized_layers(layers, where) -> dict[str, str]:
    """MIXED_PRECISION's per-module map, checked: module name -> "NVFP4" or "FP8"."""
    if not isinstance(layers, dict) or len(layers) > MAX_MODULES:
        raise CheckpointError(where, "quant_algo is MIXED_PRECISION but quantized_layers is not an object "
                                     "mapping module names to their quantization")
    out = {}
    for module, spec in layers.items():
        algo = spec.get("quant_algo") if isinstance(spec, dict) else None
        if algo not in SUPPORTED_ALGOS:
            raise CheckpointError(where, f"quantized_layers gives module {show(module, 40)} the quantization "
                                         f"{show(algo, 40)}; Elastic Chat reads {' and '.join(SUPPORTED_ALGOS)} layers")
        _group_size(spec, algo, where, module)
        out[repair_exclude_name(module)] = algo
    return out


def whole_blocks(cols, width: int, name: str) -> torch.Tensor | None:
    """The NVFP4 blocks a column selection (a prefix length or positions) covers, in order;
    None for all columns. A selection that splits a 16-wide block is an error naming `name`."""
    if cols is None:
        return None
    index = torch.arange(cols) if isinstance(cols, int) else cols
    if len(index) % BLOCK == 0:
        blocks = index.view(-1, BLOCK)
        if bool((blocks[:, 0] % BLOCK == 0).all()) and bool((blocks == blocks[:, :1] + torch.arange(BLOCK)).all()):
            return blocks[:, 0] // BLOCK
    raise UsageError(f"{name}: the submodel keeps input columns that split NVFP4's {BLOCK}-wide blocks "
                     f"(of {width}); it cannot be cut from the packed weights (use the BF16 variant)")
