"""`python -m runtime decode-check`: runs the decode step the engine replays on a model built
from a config alone (no weights are read: random values, or nothing at all on the meta device).

    python -m runtime decode-check --config DIR [--submodel NAME] [--device DEV] [--steps N]
        [--kernel auto|triton|torch]

DIR holds `config.json` and `elastic.json` (and `hf_quant_config.json` for packed weights).
A short prefill, then N decode steps through exactly `DecodeStep.send`/`receive` with the
device sampler, then one JSON line per submodel (the last stdout line is the last submodel's):
{"submodel", "layers", "ops_per_step", "device", "decode_path", "matmul_path"}. `ops_per_step`
counts the ATen ops of one step (sampling included) with torch's dispatch mode; `matmul_path` is
the packed matmuls' path (matmul.py); `--kernel triton` takes the fused Triton kernels, which on
meta run as their shape functions.

On `--device meta` tensors have shapes but no values: a host synchronisation (`.item()`,
`.tolist()`, `nonzero`, a Python branch on a value) or a data-dependent shape raises there, so a
run that finishes shows the step is capture-safe, for any shape, without a GPU or its memory.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .checkpoint.check import read_model_files
from .checkpoint.config import ATTENTION, MAMBA, MLP, ModelConfig, count_params
from .checkpoint.quant import PackedFP8, PackedNVFP4, QuantSpec
from .checkpoint.weights import (
    AttentionWeights,
    LayerWeights,
    MambaWeights,
    MLPWeights,
    ModelWeights,
    MoEWeights,
    submodel_views,
)
from .device import pick_device
from .errors import UsageError
from .matmul import force
from .model import ElasticModel
from .sampling import DeviceSampler, SamplingSettings
from .units import format_bytes

PREFILL = 8


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops dispatched while active (not those recorded by a CUDA graph capture)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


# ----------------------------------------------------------------------------- weights without a checkpoint

class _Random:
    """Random tensors on `device` (or empty ones on meta, which has no values)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, seed: int):
        self.device, self.dtype = device, dtype
        self.gen = None if device.type == "meta" else torch.Generator(device=device).manual_seed(seed)

    def normal(self, shape, scale=1.0, dtype=None):
        dtype = dtype or self.dtype
        if self.gen is None:
            return torch.empty(shape, device=self.device, dtype=dtype)
        return (torch.randn(shape, device=self.device, generator=self.gen) * scale).to(dtype)

    def full(self, shape, value, dtype=None):
        return torch.full(shape, value, device=self.device, dtype=dtype or self.dtype)

    def linear(self, shape, packed: str | None):
        """A weight (..., out, in) scaled by 1/sqrt(in), dense or packed as NVFP4/FP8."""
        fan_in = shape[-1]
        if packed is None:
            return self.normal(shape, fan_in ** -0.5)
        lead = tuple(shape[:-2])
        if packed == "FP8":  # values within E4M3's range, one scale per matrix
            weight = self.normal(shape, 1.0, torch.float32).clamp(-448, 448).to(torch.float8_e4m3fn)
            return PackedFP8(weight, self.full(lead, fan_in ** -0.5, torch.float32), "random")
        out, cols = shape[-2:]
        if self.gen is None:
            codes = torch.empty((*lead, out, cols // 2), device=self.device, dtype=torch.uint8)
        else:
            codes = torch.randint(0, 256, (*lead, out, cols // 2), device=self.device, dtype=torch.uint8,
                                  generator=self.gen)
        # E2M1 codes drawn uniformly have a standard deviation of about 3.
        scale = self.full((*lead, out, cols // 16), 1.0, torch.float32).to(torch.float8_e4m3fn)
        return PackedNVFP4(codes, scale, self.full(lead, 1 / (3 * math.sqrt(fan_in)), torch.float32), "random")


def random_weights(cfg: ModelConfig, device: torch.device, dtype: torch.dtype, quant: QuantSpec | None = None,
                   seed: int = 0) -> ModelWeights:
    """The parent's weights in the runtime's layout with random values (the shapes are what matter).
    With `quant`, the linears NVIDIA's exports pack are packed (experts, shared experts, dense MLPs,
    Mamba projections not next to attention); attention, lm_head and embeddings stay dense."""
    r = _Random(device, dtype, seed)
    h, V = cfg.hidden_size, cfg.vocab_size
    G, P, N, K = cfg.n_groups, cfg.mamba_head_dim, cfg.ssm_state_size, cfg.conv_kernel
    fmt = quant.algo if quant is not None else None
    layers = []
    for i, kind in enumerate(cfg.layer_types):
        if kind == MAMBA:
            H = cfg.mamba_num_heads
            near_attention = ATTENTION in cfg.layer_types[max(0, i - 1):i + 2]
            mfmt = None if near_attention else fmt
            mixer = MambaWeights(
                in_proj=r.linear((2 * G * N + H * (2 * P + 1), h), mfmt), in_bias=None,
                conv_w=r.normal((2 * G * N + H * P, K), K ** -0.5), conv_b=r.full((2 * G * N + H * P,), 0.0),
                A=-(r.normal((H,), 1.0, torch.float32).abs() * 4 + 0.5), D=r.full((H,), 1.0, torch.float32),
                dt_bias=r.full((H,), -2.0, torch.float32), norm_w=r.full((H * P,), 1.0),
                out_proj=r.linear((h, H * P), mfmt), out_bias=None)
        elif kind == ATTENTION:
            q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
            mixer = AttentionWeights(r.linear((q, h), None), r.linear((kv, h), None), r.linear((kv, h), None),
                                     r.linear((h, q), None))
        elif kind == MLP:
            f = cfg.intermediate_size
            mixer = MLPWeights(r.linear((f, h), fmt), r.linear((h, f), fmt), None, None)
        else:
            E, F, Fs = cfg.n_routed_experts, cfg.moe_intermediate_size, cfg.moe_shared_expert_intermediate_size
            mixer = MoEWeights(router=r.normal((E, h), h ** -0.5, torch.float32),
                               router_bias=r.full((E,), 0.0, torch.float32),
                               up=r.linear((E, F, h), fmt), down=r.linear((E, h, F), fmt),
                               shared=MLPWeights(r.linear((Fs, h), fmt), r.linear((h, Fs), fmt), None, None))
        layers.append(LayerWeights(kind, r.full((h,), 1.0), mixer))
    return ModelWeights(r.normal((V, h), 1.0), layers, r.full((h,), 1.0), r.linear((V, h), None))


def random_model(folder, device: str | None = "auto", dtype: str | None = "auto", packed: bool = True,
                 seed: int = 0) -> ElasticModel:
    """An ElasticModel for `folder`'s config.json and elastic.json with random weights (packed as
    its quantization config says, unless packed=False). On meta the default dtype is bfloat16."""
    folder = Path(folder)
    _, cfg, quant, subs = read_model_files(folder)
    quant = quant if packed else None
    if device == "meta":
        dev = torch.device("meta")
        dt = pick_device("cpu", "bfloat16" if dtype in (None, "auto") else dtype)[1]
    else:
        dev, dt = pick_device(device, dtype)
    need = count_params(cfg, subs[0]).total * (0.6 if quant is not None else dt.itemsize)
    free = _free_bytes(dev)
    if need > 0.9 * free:  # refuse before allocating: the OOM killer gives no message
        raise UsageError(f"random weights for {folder / 'config.json'} need about {format_bytes(need, 'GiB')}, "
                         f"{dev.type} has {format_bytes(free, 'GiB')} free; use --device meta to check the step "
                         "without memory")
    weights = random_weights(cfg, dev, dt, quant, seed)
    views = {s.name: submodel_views(cfg, weights, s) for s in subs}
    return ElasticModel(folder, cfg, {s.name: s for s in subs}, subs[0], weights, views, dev, dt, quant)


def _free_bytes(device: torch.device) -> float:
    if device.type == "meta":
        return float("inf")
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    import psutil

    return float(psutil.virtual_memory().available)


# ----------------------------------------------------------------------------- the check

def check_submodel(model: ElasticModel, name: str, steps: int, sampling: SamplingSettings | None = None) -> dict:
    """A short prefill and `steps` decode steps of submodel `name`; returns its result line."""
    cfg = model.config
    cache = model.new_cache(name, PREFILL + steps + 1)
    prompt = [(17 * i + 5) % cfg.vocab_size for i in range(PREFILL)]
    logits = model.forward(name, cache, prompt)
    step = model.decoder(name, cache)
    sampler = DeviceSampler(sampling or SamplingSettings(temperature=0.6, top_p=0.95, seed=0), model.device)
    counted = None
    for i in range(steps):
        # The first step: on a GPU later ones replay a graph, which dispatches no ops to count.
        counter = OpCounter() if i == 0 else None
        if counter is not None:
            with counter:
                logits = step.send(sampler.on_device(logits))
            counted = counter.total
        else:
            logits = step.send(sampler.on_device(logits))
        step.receive()
    if cache.length != PREFILL + steps:
        raise RuntimeError(f"the cache holds {cache.length} tokens after {PREFILL} + {steps}")
    return {"submodel": name, "layers": cfg.num_layers, "ops_per_step": counted, "device": str(model.device),
            "decode_path": model.decode_path(), "matmul_path": model.compute_path()}


def decode_check(folder, submodel: str | None = None, device: str | None = "auto", steps: int = 4,
                 kernel: str | None = None) -> list[dict]:
    if steps < 1:
        raise UsageError("--steps must be at least 1")
    force(kernel)
    try:
        model = random_model(folder, device)
        names = [model.submodel(submodel).name] if submodel else list(model.views)
        with torch.inference_mode():
            return [check_submodel(model, name, steps) for name in names]
    finally:
        force(None)


def main(args) -> int:
    for row in decode_check(args.config, args.submodel, args.device, args.steps, args.kernel):
        print(json.dumps(row), flush=True)
    return 0
