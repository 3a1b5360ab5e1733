"""`extract`: write one submodel as a standalone, physically sliced checkpoint.

This works on the files in the hub layout, independently of the runtime's internal layout
(weights.py), so a test comparing the two checks one against the other. Tensors keep their
stored dtype and are processed one at a time, so extracting needs little memory.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .checkpoint_check import inspect_checkpoint
from .config import ATTENTION, MAMBA, MLP, ModelConfig
from .elastic import FORMAT, PER_LAYER_FIELDS, Submodel
from .errors import UsageError
from .weights import EMBED_NAMES

# Files that travel with the weights: tokenizer, chat template, generation defaults.
COMPANION_GLOBS = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "generation_config.json",
                   "chat_template*", "vocab.*", "merges.txt", "*.model", "LICENSE*", "README*")


def extract(folder, name: str, out) -> Path:
    """Writes submodel `name` of the checkpoint in `folder` to the new folder `out`."""
    folder, out = Path(folder), Path(out)
    checked = inspect_checkpoint(folder)  # the same checks loading runs
    cfg, subs, table = checked.config, checked.submodels, checked.table
    if checked.quant is not None:
        raise UsageError(f"{folder} is a quantized checkpoint; extract works on BF16/FP16/FP32 checkpoints "
                         "(extract from the BF16 variant, then quantize)")
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
    new_config = _sliced_config(checked.raw_config, cfg, sub)

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    except OSError as e:
        raise UsageError(f"cannot write to {out.parent} ({e.strerror}); choose another folder") from None
    try:
        save_file(_sliced_tensors(cfg, table, sub), str(tmp / "model.safetensors"), metadata={"format": "pt"})
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


def _sliced_config(raw: dict, cfg: ModelConfig, sub: Submodel) -> dict:
    new = {k: v for k, v in raw.items() if k != "quantization_config"}
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


def _sliced_tensors(cfg: ModelConfig, table, sub: Submodel) -> dict[str, torch.Tensor]:
    handles = {}

    def read(name):
        info = table[name]
        if info.file not in handles:
            handles[info.file] = safe_open(str(info.file), framework="pt")
        f = handles[info.file]
        return f.get_tensor(name if name in f.keys() else EMBED_NAMES[1])

    h, out = sub.hidden_size, {}
    out["backbone.embeddings.weight"] = read("backbone.embeddings.weight")[:, :h]
    out["backbone.norm_f.weight"] = read("backbone.norm_f.weight")[:h]
    out["lm_head.weight"] = read("lm_head.weight")[:, :h]
    for i, kind in enumerate(cfg.layer_types):
        p = f"backbone.layers.{i}."
        out[p + "norm.weight"] = read(p + "norm.weight")[:h]
        m = p + "mixer."
        if kind == MAMBA:
            P, d, gn = cfg.mamba_head_dim, cfg.mamba_d_inner, cfg.n_groups * cfg.ssm_state_size
            heads = _mamba_head_index(cfg, sub.mamba_num_heads[i])
            channels = _rows_of_heads(heads, P)
            bc = torch.arange(2 * gn)
            in_rows = torch.cat([channels, d + channels, 2 * d + bc, 2 * d + 2 * gn + heads])
            out[m + "in_proj.weight"] = read(m + "in_proj.weight")[in_rows][:, :h]
            conv_rows = torch.cat([channels, d + bc])
            out[m + "conv1d.weight"] = read(m + "conv1d.weight")[conv_rows]
            for name in ("A_log", "D", "dt_bias"):
                out[m + name] = read(m + name)[heads]
            out[m + "norm.weight"] = read(m + "norm.weight")[channels]
            out[m + "out_proj.weight"] = read(m + "out_proj.weight")[:h][:, channels]
            if cfg.use_bias:
                out[m + "in_proj.bias"] = read(m + "in_proj.bias")[in_rows]
                out[m + "out_proj.bias"] = read(m + "out_proj.bias")[:h]
            if cfg.use_conv_bias:
                out[m + "conv1d.bias"] = read(m + "conv1d.bias")[conv_rows]
        elif kind == ATTENTION:
            for name in ("q_proj", "k_proj", "v_proj"):
                out[m + f"{name}.weight"] = read(m + f"{name}.weight")[:, :h]
            out[m + "o_proj.weight"] = read(m + "o_proj.weight")[:h]
        elif kind == MLP:
            out.update(_sliced_mlp(read, m, sub.intermediate_size[i], h, cfg.mlp_bias))
        else:
            e, f = sub.n_routed_experts[i], sub.moe_intermediate_size[i]
            out[m + "gate.weight"] = read(m + "gate.weight")[:e, :h]
            out[m + "gate.e_score_correction_bias"] = read(m + "gate.e_score_correction_bias")[:e]
            for k in range(e):
                out[m + f"experts.{k}.up_proj.weight"] = read(m + f"experts.{k}.up_proj.weight")[:f, :h]
                out[m + f"experts.{k}.down_proj.weight"] = read(m + f"experts.{k}.down_proj.weight")[:h, :f]
            out.update(_sliced_mlp(read, m + "shared_experts.", sub.moe_shared_expert_intermediate_size[i], h,
                                   cfg.mlp_bias))
    return {k: v.contiguous() for k, v in out.items()}


def _sliced_mlp(read, m, f, h, bias):
    out = {m + "up_proj.weight": read(m + "up_proj.weight")[:f, :h],
           m + "down_proj.weight": read(m + "down_proj.weight")[:h, :f]}
    if bias:
        out[m + "up_proj.bias"] = read(m + "up_proj.bias")[:f]
        out[m + "down_proj.bias"] = read(m + "down_proj.bias")[:h]
    return out
