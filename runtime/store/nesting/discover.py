"""Learning a nested submodel's widths from a sliced checkpoint, and proving the nesting by values.

NVIDIA publishes one parent checkpoint; the 23B and 12B exist as standard, narrower
`nemotron_h` checkpoints that slicing produced. Given the parent and such a slice, `discover`:

1. reads both `config.json` files and checks every field that is not elastic matches
   (layer pattern, head sizes, top-k, group counts, vocabulary ...), naming each mismatch;
2. takes the slice's widths (hidden size, Mamba heads, experts, expert / shared / dense FFN)
   from its config and checks its tensor shapes agree and that the widths nest in the parent;
3. compares a set of the slice's tensors, value by value, with the parent's prefix views
   chosen so that every axis's order is pinned down: norms and embedding rows (hidden
   order), `A_log`/`D`/`dt_bias`, the gated norm and conv1d (Mamba heads within groups),
   router bias and rows (expert order), first and last FFN rows of the first and last kept
   expert (FFN order). Same storage on both sides must match bit for bit (packed NVFP4/FP8
   codes and scales included); a BF16 slice of a quantized parent (or the reverse) must match
   within the quantization error, and the report says which comparison was made.

Only headers and the compared rows are read, so a hub slice costs megabytes, not gigabytes.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ...checkpoint.config import ATTENTION, MAMBA, MLP, MOE, ModelConfig, count_params, read_json
from ...checkpoint.quant import PackedFP8, PackedNVFP4, QuantSpec, parse_quant_spec, whole_blocks
from ...checkpoint.safetensors_io import TensorInfo
from ...checkpoint.submodel_table import ESTIMATED, SubmodelTable
from ...checkpoint.submodels import FORMAT, PER_LAYER_FIELDS, Submodel, parent_submodel, parse_elastic
from ...checkpoint.weights import check_tensor_table, mamba_head_order
from ...errors import CheckpointError, UsageError, show
from .tensor_source import TensorSource, row_bytes

# Fields that must be equal in a parent and its slice: nesting shrinks widths, nothing else.
FIXED_FIELDS = ("layer_types", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "num_experts_per_tok", "n_group",
                "topk_group", "norm_topk_prob", "routed_scaling_factor", "use_bias", "use_conv_bias", "mlp_bias",
                "time_step_min", "layer_norm_epsilon")
WIDTH_FIELDS = ("hidden_size", *PER_LAYER_FIELDS)


@dataclass
class NestingReport:
    name: str
    widths: dict
    verified: bool
    problems: list[str] = field(default_factory=list)
    checked_tensors: int = 0
    bytes_read: int = 0
    comparison: str = ""  # "bit-exact", or how values were compared
    submodel: Submodel | None = None

    def summary(self) -> dict:
        """The contract's last line."""
        return {"name": self.name, "widths": self.widths, "verified": self.verified,
                "checked_tensors": self.checked_tensors, "bytes_read": self.bytes_read}


# ----------------------------------------------------------------------------- discovery

def discover(parent: TensorSource, piece: TensorSource, name: str | None = None) -> NestingReport:
    """Derives the widths of `piece` (a sliced checkpoint) inside `parent` and verifies them by value."""
    pcfg = ModelConfig.from_dict(parent.json("config.json"), f"{parent.label}/config.json")
    raw_slice = piece.json("config.json")
    scfg = ModelConfig.from_dict(raw_slice, f"{piece.label}/config.json")
    report = NestingReport(name or "", {}, False)

    mismatched = [f for f in FIXED_FIELDS if getattr(pcfg, f) != getattr(scfg, f)]
    for f in mismatched:
        report.problems.append(f"{f} differs: the slice has {_config_value(getattr(scfg, f))}, the parent "
                               f"{_config_value(getattr(pcfg, f))}; a nested submodel only narrows widths")
    if "layer_types" in mismatched or "n_groups" in mismatched:
        return _finish(report, parent, piece)

    entry = {"name": name or "slice", "hidden_size": scfg.hidden_size}
    for f, kind in PER_LAYER_FIELDS.items():
        if pcfg.layers_of(kind):
            entry[f] = getattr(scfg, f)
    try:
        sub = parse_elastic({"format": FORMAT, "submodels": [{"name": "parent"}, entry]}, pcfg,
                            f"the widths of {piece.label}")[1]
    except CheckpointError as e:
        report.problems.append(str(e))
        return _finish(report, parent, piece)
    report.widths = {k: v for k, v in sub.to_dict(pcfg).items() if k != "name"}
    report.name = name or size_name(count_params(pcfg, sub).total)
    report.submodel = Submodel(report.name, *[getattr(sub, f) for f in WIDTH_FIELDS])

    pquant, squant = _quant(parent), _quant(piece)
    try:
        check_tensor_table(pcfg, _infos(parent), Path(parent.label), pquant)
        check_tensor_table(scfg, _infos(piece), Path(piece.label), squant)
    except CheckpointError as e:
        report.problems.append(str(e))
        return _finish(report, parent, piece)
    if report.problems:
        return _finish(report, parent, piece)

    probes = list(_probes(pcfg, sub))
    p_side, s_side = _Side(parent, pquant), _Side(piece, squant)
    p_side.prefetch(pr.parent for pr in probes)
    s_side.prefetch(pr.slice for pr in probes)
    kinds = set()
    for probe in probes:
        a = p_side.value(probe.parent)
        b = s_side.value(probe.slice)
        how, problem = compare(a, b)
        report.checked_tensors += 1
        if problem:
            report.problems.append(f"tensor {probe.slice.name!r} of the slice does not equal the parent's prefix "
                                   f"view ({problem}): channels, heads or experts are in another order, or it "
                                   "is not a slice of this parent")
            return _finish(report, parent, piece)
        kinds.add(how)
    report.comparison = "; ".join(sorted(kinds))
    report.verified = True
    return _finish(report, parent, piece)


def _finish(report: NestingReport, parent: TensorSource, piece: TensorSource) -> NestingReport:
    report.bytes_read = parent.bytes_read + piece.bytes_read
    return report


def _config_value(value) -> str:
    """A config field for the report: a layer pattern in its letters (as config.json spells it), else quoted."""
    if isinstance(value, tuple) and value and isinstance(value[0], str):
        letters = {MAMBA: "M", ATTENTION: "*", MOE: "E", MLP: "-"}
        return "".join(letters.get(v, "?") for v in value) + f" ({len(value)} layers)"
    return show(value)


def size_name(params: int) -> str:
    """A submodel's name from its parameter count, as NVIDIA names them: "12B", "1.5M"."""
    if params >= 10**9:
        return f"{round(params / 1e9)}B"
    if params >= 10**5:
        return f"{params / 1e6:.1f}M"
    return f"{params / 1e3:.0f}K"


def _quant(source: TensorSource) -> QuantSpec | None:
    hf = source.json("hf_quant_config.json") if source.has("hf_quant_config.json") else None
    return parse_quant_spec(hf, source.json("config.json"), f"{source.label}/hf_quant_config.json",
                            f"{source.label}/config.json")


def _infos(source: TensorSource) -> dict[str, TensorInfo]:
    return {n: replace(t, file=Path(source.label) / t.file) for n, t in source.tensors().items()}


# ----------------------------------------------------------------------------- what is compared

@dataclass(frozen=True)
class Read:
    """Rows of one tensor (None: all of it), then a column selection (None: all columns)."""

    name: str
    rows: tuple[int, ...] | None
    cols: torch.Tensor | int | None = None  # an index, or a prefix length (the last axis)
    pick: torch.Tensor | None = None  # positions along the first axis, after reading all of it


@dataclass(frozen=True)
class Probe:
    slice: Read
    parent: Read


def _ends(n: int) -> tuple[int, ...]:
    return tuple(sorted({0, n - 1}))


def _probes(cfg: ModelConfig, sub: Submodel):
    """Pairs of (slice rows, parent prefix view) that together pin the order of every elastic axis."""
    h = sub.hidden_size
    vocab_rows = tuple(sorted({0, 1, cfg.vocab_size // 2, cfg.vocab_size - 1}))
    yield Probe(Read("backbone.norm_f.weight", None), Read("backbone.norm_f.weight", None, h))
    for name in ("backbone.embeddings.weight", "lm_head.weight"):
        yield Probe(Read(name, vocab_rows), Read(name, vocab_rows, h))
    for i, kind in enumerate(cfg.layer_types):
        p = f"backbone.layers.{i}."
        m = p + "mixer."
        yield Probe(Read(p + "norm.weight", None), Read(p + "norm.weight", None, h))
        if kind == MAMBA:
            yield from _mamba_probes(cfg, m, h, sub.mamba_num_heads[i])
        elif kind == ATTENTION:
            q = cfg.num_attention_heads * cfg.head_dim
            kv = cfg.num_key_value_heads * cfg.head_dim
            for name, rows in (("q_proj", _ends(q)), ("k_proj", (0,)), ("v_proj", (kv - 1,))):
                yield Probe(Read(m + f"{name}.weight", rows), Read(m + f"{name}.weight", rows, h))
            yield Probe(Read(m + "o_proj.weight", _ends(h)), Read(m + "o_proj.weight", _ends(h)))
        elif kind == MLP:
            yield from _mlp_probes(m, h, sub.intermediate_size[i], cfg.mlp_bias)
        else:
            e, f = sub.n_routed_experts[i], sub.moe_intermediate_size[i]
            yield Probe(Read(m + "gate.e_score_correction_bias", None),
                        Read(m + "gate.e_score_correction_bias", None, e))
            yield Probe(Read(m + "gate.weight", _ends(e)), Read(m + "gate.weight", _ends(e), h))
            for k in _ends(e):
                yield from _mlp_probes(m + f"experts.{k}.", h, f, False)
            yield from _mlp_probes(m + "shared_experts.", h, sub.moe_shared_expert_intermediate_size[i], cfg.mlp_bias)


def _mlp_probes(m: str, h: int, f: int, bias: bool):
    yield Probe(Read(m + "up_proj.weight", _ends(f)), Read(m + "up_proj.weight", _ends(f), h))
    yield Probe(Read(m + "down_proj.weight", _ends(h)), Read(m + "down_proj.weight", _ends(h), f))
    if bias:
        yield Probe(Read(m + "up_proj.bias", None), Read(m + "up_proj.bias", None, f))
        yield Probe(Read(m + "down_proj.bias", None), Read(m + "down_proj.bias", None, h))


def mamba_kept_heads(cfg: ModelConfig, heads: int) -> torch.Tensor:
    """Parent head ids a submodel with `heads` keeps, group by group (the hub layout of a slice)."""
    return mamba_head_order(cfg, heads, rank_major=False)


def _mamba_probes(cfg: ModelConfig, m: str, h: int, heads: int):
    P, d, gn = cfg.mamba_head_dim, cfg.mamba_d_inner, cfg.n_groups * cfg.ssm_state_size
    kept = mamba_kept_heads(cfg, heads)
    channels = (kept[:, None] * P + torch.arange(P)[None]).flatten()
    bc = torch.arange(2 * gn)
    conv_rows = torch.cat([channels, d + bc])
    in_rows = torch.cat([channels, d + channels, 2 * d + bc, 2 * d + 2 * gn + kept])
    for name in ("A_log", "D", "dt_bias"):
        yield Probe(Read(m + name, None), Read(m + name, None, kept))
    yield Probe(Read(m + "norm.weight", None), Read(m + "norm.weight", None, channels))
    yield Probe(Read(m + "conv1d.weight", None), Read(m + "conv1d.weight", None, pick=conv_rows))
    if cfg.use_conv_bias:
        yield Probe(Read(m + "conv1d.bias", None), Read(m + "conv1d.bias", None, conv_rows))
    # in_proj: a z row and an x row of the last kept channel, and the dt row of the last kept head.
    dk = heads * P
    s_rows = (dk - 1, 2 * dk - 1, 2 * dk + 2 * gn + heads - 1)
    yield Probe(Read(m + "in_proj.weight", s_rows),
                Read(m + "in_proj.weight", tuple(int(in_rows[r]) for r in s_rows), h))
    yield Probe(Read(m + "out_proj.weight", _ends(h)), Read(m + "out_proj.weight", _ends(h), channels))
    if cfg.use_bias:
        yield Probe(Read(m + "in_proj.bias", None), Read(m + "in_proj.bias", None, in_rows))
        yield Probe(Read(m + "out_proj.bias", None), Read(m + "out_proj.bias", None, h))


# ----------------------------------------------------------------------------- reading and comparing

@dataclass(frozen=True)
class Value:
    """Compared values: the stored form (for bit-exact checks) and fp32 values with an error bound."""

    storage: str  # "F32", "BF16", "F16", "NVFP4" or "FP8"
    raw: tuple[torch.Tensor, ...]  # stored tensors, bit patterns compared when storages agree
    values: torch.Tensor  # fp32
    bound: torch.Tensor  # fp32, per element: how far the true value may be from `values`


class _Side:
    def __init__(self, source: TensorSource, quant: QuantSpec | None):
        self.source, self.quant = source, quant
        self.tensors = source.tensors()

    def _parts(self, read: Read) -> list[tuple[str, tuple[int, ...] | None]]:
        if self.quant is not None and read.name + "_scale" in self.tensors:
            fmt = self.quant.format_of(read.name.removesuffix(".weight"))
            whole_scale = fmt == "FP8"
            parts = [(read.name, read.rows), (read.name + "_scale", None if whole_scale else read.rows)]
            if fmt == "NVFP4":
                parts.append((read.name + "_scale_2", None))
            return parts
        return [(read.name, read.rows)]

    def prefetch(self, reads) -> None:
        ranges = []
        for read in reads:
            for name, rows in self._parts(read):
                t = self.tensors[name]
                if rows is None or not t.shape:
                    ranges.append((str(t.file), t.start, max(1, t.nbytes)))
                else:
                    ranges += [(str(t.file), t.start + r * row_bytes(t), row_bytes(t)) for r in rows]
        self.source.prefetch(ranges)

    def _rows(self, name: str, rows) -> torch.Tensor:
        t = self.tensors[name]
        if rows is None or not t.shape:
            return self.source.whole(name)
        return torch.cat([self.source.rows(name, r, r + 1) for r in rows])

    def value(self, read: Read) -> Value:
        parts = [self._rows(n, r) for n, r in self._parts(read)]
        if read.pick is not None:
            parts[0] = parts[0][read.pick]
        if len(parts) == 3:
            packed = PackedNVFP4(parts[0], parts[1], parts[2].reshape(()), read.name)
            values = packed.dequantize()
            step = (packed.scale.float() * packed.scale2.float()).repeat_interleave(16, dim=-1)
            bound = _select(step + values.abs() / 8, read.cols)  # half the widest E2M1 gap, plus scale rounding
            try:
                blocks = whole_blocks(read.cols, packed.shape[-1], read.name)
            except UsageError:  # columns that split blocks: compare values only
                return Value("NVFP4-values", (), _select(values, read.cols), bound)
            if blocks is not None:
                codes = (blocks[:, None] * 8 + torch.arange(8)).flatten()
                packed = PackedNVFP4(packed.packed[:, codes], _take_bytes(packed.scale, blocks), packed.scale2)
            return Value("NVFP4", packed.tensors(), _select(values, read.cols), bound)
        if len(parts) == 2:
            packed = PackedFP8(parts[0], parts[1].reshape(()), read.name)
            values = _select(packed.dequantize(), read.cols)
            codes = parts[0] if read.cols is None else _take_bytes(
                parts[0], torch.arange(read.cols) if isinstance(read.cols, int) else read.cols)
            bound = values.abs() / 16 + packed.scale.float() * 2.0**-9
            return Value("FP8", (codes, packed.scale), values, bound)
        t = _select(parts[0], read.cols)
        storage = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}.get(t.dtype, str(t.dtype))
        rel = {"BF16": 2.0**-8, "F16": 2.0**-11}.get(storage, 0.0)
        values = t.float()
        return Value(storage, (t,), values, values.abs() * rel)


def _select(t: torch.Tensor, cols):
    if cols is None:
        return t
    if isinstance(cols, int):
        return t[..., :cols] if t.dim() >= 2 else t[:cols]
    return t[..., cols] if t.dim() >= 2 else t[cols]


def _take_bytes(t: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """t[:, cols] for a float8 tensor (indexed through its bytes)."""
    return t.view(torch.uint8)[:, cols].view(t.dtype)


def compare(parent: Value, piece: Value) -> tuple[str, str | None]:
    """How the two were compared, and what differs (None when they match)."""
    if parent.values.shape != piece.values.shape:
        return "shape", f"shape {list(piece.values.shape)} against {list(parent.values.shape)}"
    if parent.storage == piece.storage and parent.raw and piece.raw:
        same = all(_bits_equal(a, b) for a, b in zip(parent.raw, piece.raw))
        if same:
            return "bit-exact", None
        if parent.storage in ("F32", "BF16", "F16"):
            diff = (parent.values - piece.values).abs().max().item()
            return "bit-exact", f"values differ, by up to {diff:.3g}"
        how = f"within {parent.storage} quantization error (re-quantized, not bit-exact)"
    else:
        quantized = sorted({s.split("-")[0] for s in (parent.storage, piece.storage)} - {"F32", "BF16", "F16"})
        how = (f"within {'/'.join(quantized)} quantization error" if quantized
               else "after rounding to the stored precision")
    excess = (parent.values - piece.values).abs() - (parent.bound + piece.bound) - 1e-6
    if not torch.isfinite(parent.values).all() or not torch.isfinite(piece.values).all():
        return how, "not finite values"
    if (excess > 0).any():
        worst = (parent.values - piece.values).abs().max().item()
        return how, f"values differ by up to {worst:.3g}, more than the {how.replace('within ', '')} allows"
    return how, None


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.contiguous(), b.contiguous()
    return torch.equal(a.view(torch.uint8) if a.dim() else a.reshape(1).view(torch.uint8),
                       b.view(torch.uint8) if b.dim() else b.reshape(1).view(torch.uint8))


# ----------------------------------------------------------------------------- elastic.json

def write_verified(folder, report: NestingReport, source: dict, table: SubmodelTable | None = None) -> Path:
    """Adds (or corrects) the verified submodel in the checkpoint's `elastic.json`, with its source.

    `table` is the one the folder runs with (`submodel_tables.folder_table`). When the folder has
    no elastic.json and that table is the catalog's estimate, the file starts from it: the parent's
    name, `max_thinking_tokens` and every other submodel are kept, those estimated marked
    `"estimated": ORIGIN` so they stay estimated (verifying the 12B must not drop the 23B).
    The file is rewritten atomically and read back through the normal parser before it replaces
    the old one, so a bad write can never leave the checkpoint unloadable."""
    if not report.verified or report.submodel is None:
        raise ValueError("only a verified slice can be written")
    folder = Path(folder)
    cfg = ModelConfig.from_dict(read_json(folder / "config.json"), folder / "config.json")
    path = folder / "elastic.json"
    if path.exists():
        data = read_json(path)
        parse_elastic(data, cfg, path)  # refuse to edit a file we could not load
        entries = [e for e in data["submodels"]]
    elif table is not None and table.elastic is not None:
        data = table.elastic
        parse_elastic(data, cfg, table.origin)
        entries = [data["submodels"][0]] + [
            {**e, "estimated": table.origin} if table.state(e["name"]) == ESTIMATED else e
            for e in data["submodels"][1:]]
    else:
        data = {}
        entries = [{"name": size_name(count_params(cfg, parent_submodel(cfg)).total)}]
    kept = {k: v for k, v in data.items() if k not in ("format", "submodels")}  # max_thinking_tokens ...
    new = {**report.submodel.to_dict(cfg), "verified": {**source, "checked_tensors": report.checked_tensors,
                                                          "comparison": report.comparison}}
    same_widths = [i for i, e in enumerate(entries[1:], 1) if _widths_of(e, cfg) == _widths_of(new, cfg)]
    same_name = [i for i, e in enumerate(entries[1:], 1) if e.get("name") == new["name"]]
    for i in sorted(set(same_widths) | set(same_name), reverse=True):
        del entries[i]
    entries.append(new)
    parent, rest = entries[0], entries[1:]
    rest.sort(key=lambda e: -count_params(cfg, parse_elastic({"format": FORMAT, "submodels": [parent, e]},
                                                             cfg)[1]).total)
    data = {"format": FORMAT, **kept, "submodels": [parent, *rest]}
    parse_elastic(data, cfg, path)
    fd, tmp = tempfile.mkstemp(prefix=".elastic-", suffix=".json", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def _widths_of(entry: dict, cfg: ModelConfig) -> dict:
    sub = parse_elastic({"format": FORMAT, "submodels": [{"name": "p"}, {**entry, "name": "x"}]}, cfg)[1]
    return {f: getattr(sub, f) for f in WIDTH_FIELDS}
