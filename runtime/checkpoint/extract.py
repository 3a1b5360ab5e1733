"""`extract`: write one submodel as a standalone, physically sliced checkpoint.

This works on the files in the hub layout, independently of the runtime's internal layout
(weights.py), so a test comparing the two checks one against the other. Tensors keep their
stored dtype and are processed one at a time, so extracting needs little memory. Nothing is left
behind by a failure: the output is written to a temporary folder beside `out` and renamed at the end,
and any failure (a full disk, which safetensors reports as its own error from Rust) is one line.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..errors import UsageError
from ..native import guarded
from .check import inspect_checkpoint
from .config import ATTENTION, MAMBA, MLP, ModelConfig
from .quant import BLOCK, QuantSpec, whole_blocks
from .submodels import FORMAT, PER_LAYER_FIELDS, Submodel
from .weights import EMBED_NAMES

# Files that travel with the weights: tokenizer, chat template, generation defaults.
COMPANION_GLOBS = ("hf_quant_config.json", "tokenizer*", "special_tokens_map.json", "added_tokens.json",
                   "generation_config.json", "chat_template*", "vocab.*", "merges.txt", "*.model", "LICENSE*",
                   "README*")


def extract(folder, name: str, out) -> Path:
    """Writes submodel `name` of the checkpoint in `folder` to the new folder `out`."""
    folder, out = Path(folder), Path(out)
    checked = inspect_checkpoint(folder)  # the same checks loading runs
    cfg, subs, table = checked.config, checked.submodels, checked.table
    quant = checked.quant  # a quantized checkpoint is sliced in its packed form (see _Slicer)
    sub = next((s for s in subs if s.name == name), None)
    if sub is None:
        raise UsageError(f"unknown submodel {name!r}; this checkpoint has {', '.join(s.name for s in subs)}")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out} already exists and is not a folder; choose a new folder (nothing was overwritten)")
    try:
        if out.exists() and any(out.iterdir()):
            raise UsageError(f"{out} already exists and is not empty; choose a new folder")
        if out.resolve().is_relative_to(folder.resolve()):
            raise UsageError(f"{out} is inside the checkpoint folder; choose a folder outside it")
    except OSError as e:
        raise UsageError(f"cannot use {out} ({e.strerror}); choose another folder") from None
    new_config = _sliced_config(checked.raw_config, cfg, sub, keep_quant=quant is not None)

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as e:
        raise UsageError(f"cannot write to {out.parent} ({e.strerror}); choose another folder") from None
    try:
        with guarded(lambda why: UsageError(f"cannot read the weights of {folder} ({why}); nothing was written")):
            tensors = _sliced_tensors(cfg, table, sub, quant)
        # safetensors writes in Rust: a full disk is its SafetensorError, not an OSError
        with guarded(lambda why: UsageError(f"cannot write {out} ({why}); nothing was written")):
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(new_config, indent=2) + "\n")
        nested = [s for s in subs if s.fits_within(sub)]
        (tmp / "elastic.json").write_text(json.dumps(_nested_elastic(cfg, sub, nested), indent=2) + "\n")
        for pattern in COMPANION_GLOBS:
            for f in folder.glob(pattern):
                if f.is_file():  # a link (a hub cache snapshot is all links) is copied as the file it names
                    shutil.copy2(f, tmp / f.name)
        if out.exists():
            out.rmdir()  # still empty (checked above); fails rather than overwrite anything put there since
        tmp.rename(out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"cannot write {out} ({e.strerror or e}); nothing was written") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _sliced_config(raw: dict, cfg: ModelConfig, sub: Submodel, keep_quant: bool) -> dict:
    new = {k: v for k, v in raw.items() if keep_quant or k != "quantization_config"}
    new["hidden_size"] = sub.hidden_size
    for field in PER_LAYER_FIELDS:
        try:
            new[field] = sub.uniform(field, cfg)
        except ValueError:
            raise UsageError(f"submodel {sub.name!r} has a different {field} per layer; a transformers "
                             "config cannot express that, so it cannot be extracted") from None
    # transformers writes inf as {"__float__": "Infinity"}; keep that spelling so it reads back.
    if isinstance(new.get("time_step_limit"), list):
        new["time_step_limit"] = [{"__float__": "Infinity"} if v == float("inf") else v for v in new["time_step_limit"]]
    return new


def _nested_elastic(cfg: ModelConfig, sub: Submodel, nested: list[Submodel]) -> dict:
    entries = [s.to_dict(cfg) for s in nested]
    entries.sort(key=lambda e: e["name"] != sub.name)  # the extracted model is the new parent
    return {"format": FORMAT, "submodels": entries}


def _mamba_head_index(cfg: ModelConfig, heads: int) -> torch.Tensor:
    """Original head ids a submodel keeps: the first heads/G of every group, group by group."""
    G = cfg.n_groups
    Q, q = cfg.mamba_num_heads // G, heads // G
    return torch.tensor([g * Q + j for g in range(G) for j in range(q)])


def _rows_of_heads(heads: torch.Tensor, unit: int, offset: int = 0) -> torch.Tensor:
    return (offset + heads[:, None] * unit + torch.arange(unit)[None]).flatten()


def _sliced_tensors(cfg: ModelConfig, table, sub: Submodel, quant: QuantSpec | None) -> dict[str, torch.Tensor]:
    s = _Slicer(table, quant)
    h = sub.hidden_size
    s.plain("backbone.embeddings.weight", cols=h)
    s.plain("backbone.norm_f.weight", rows=slice(0, h))
    s.linear("lm_head.weight", cols=h)
    for i, kind in enumerate(cfg.layer_types):
        p = f"backbone.layers.{i}."
        s.plain(p + "norm.weight", rows=slice(0, h))
        m = p + "mixer."
        if kind == MAMBA:
            P, d, gn = cfg.mamba_head_dim, cfg.mamba_d_inner, cfg.n_groups * cfg.ssm_state_size
            heads = _mamba_head_index(cfg, sub.mamba_num_heads[i])
            channels = _rows_of_heads(heads, P)
            bc = torch.arange(2 * gn)
            in_rows = torch.cat([channels, d + channels, 2 * d + bc, 2 * d + 2 * gn + heads])
            s.linear(m + "in_proj.weight", in_rows, h)
            conv_rows = torch.cat([channels, d + bc])
            s.plain(m + "conv1d.weight", rows=conv_rows)
            for name in ("A_log", "D", "dt_bias"):
                s.plain(m + name, rows=heads)
            s.plain(m + "norm.weight", rows=channels)
            s.linear(m + "out_proj.weight", slice(0, h), channels)
            if cfg.use_bias:
                s.plain(m + "in_proj.bias", rows=in_rows)
                s.plain(m + "out_proj.bias", rows=slice(0, h))
            if cfg.use_conv_bias:
                s.plain(m + "conv1d.bias", rows=conv_rows)
        elif kind == ATTENTION:
            for name in ("q_proj", "k_proj", "v_proj"):
                s.linear(m + f"{name}.weight", cols=h)
            s.linear(m + "o_proj.weight", slice(0, h))
        elif kind == MLP:
            _sliced_mlp(s, m, sub.intermediate_size[i], h, cfg.mlp_bias)
        else:
            e, f = sub.n_routed_experts[i], sub.moe_intermediate_size[i]
            s.plain(m + "gate.weight", rows=slice(0, e), cols=h)
            s.plain(m + "gate.e_score_correction_bias", rows=slice(0, e))
            for k in range(e):
                _sliced_mlp(s, m + f"experts.{k}.", f, h, False)
            _sliced_mlp(s, m + "shared_experts.", sub.moe_shared_expert_intermediate_size[i], h, cfg.mlp_bias)
    return {k: v.contiguous() for k, v in s.out.items()}


def _sliced_mlp(s: "_Slicer", m: str, f: int, h: int, bias: bool) -> None:
    s.linear(m + "up_proj.weight", slice(0, f), h)
    s.linear(m + "down_proj.weight", slice(0, h), f)
    if bias:
        s.plain(m + "up_proj.bias", rows=slice(0, f))
        s.plain(m + "down_proj.bias", rows=slice(0, h))


Rows = slice | torch.Tensor | None  # a prefix, positions, or all
Cols = int | torch.Tensor | None  # a prefix length, positions, or all


class _Slicer:
    """Reads tensors one at a time and keeps the submodel's part of each in `out`.

    A quantized linear (ModelOpt NVFP4 or FP8) is sliced in its stored form, so the slice holds
    the parent's very codes and scales: NVFP4 codes two per byte and one E4M3 scale per 16
    inputs (input columns must be kept in whole blocks), FP8 codes one per byte; the global
    scales (`weight_scale_2`, `input_scale`, FP8's `weight_scale`) are per matrix and copied."""

    def __init__(self, table, quant: QuantSpec | None):
        self.table, self.quant = table, quant
        self.handles, self.out = {}, {}

    def read(self, name: str) -> torch.Tensor:
        info = self.table[name]
        if info.file not in self.handles:
            self.handles[info.file] = safe_open(str(info.file), framework="pt")
        f = self.handles[info.file]
        return f.get_tensor(name if name in f.keys() else EMBED_NAMES[1])

    def plain(self, name: str, rows: Rows = None, cols: Cols = None) -> None:
        self.out[name] = _take(self.read(name), rows, cols)

    def linear(self, name: str, rows: Rows = None, cols: Cols = None) -> None:
        if self.quant is None or name + "_scale" not in self.table:
            return self.plain(name, rows, cols)
        module = name[: -len(".weight")]
        fmt = "NVFP4" if self.table[name].dtype == "U8" else "FP8"
        if fmt == "NVFP4":
            blocks = whole_blocks(cols, self.table[name].shape[-1] * 2, module)
            codes = None if blocks is None else (blocks[:, None] * (BLOCK // 2) + torch.arange(BLOCK // 2)).flatten()
            self.out[name] = _take(self.read(name), rows, codes)
            self.out[name + "_scale"] = _take(self.read(name + "_scale"), rows, blocks)
        else:
            self.out[name] = _take(self.read(name), rows, cols)
        for scalar in (name + "_scale_2", name + "_input_scale", module + ".input_scale") + \
                ((name + "_scale",) if fmt == "FP8" else ()):
            if scalar in self.table:
                self.out[scalar] = self.read(scalar)


def _take(t: torch.Tensor, rows: Rows, cols: Cols) -> torch.Tensor:
    """t[rows][:, cols], also for float8 tensors (indexed through their bytes)."""
    dtype = t.dtype
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.view(torch.uint8)
    if rows is not None:
        t = t[rows]
    if cols is not None:
        t = t[:, :cols] if isinstance(cols, int) else t[:, cols]
    return t.view(dtype) if t.dtype != dtype else t
