"""The decode step: one token through one submodel, written so that a CUDA graph can replay it.

Everything the step reads or writes lives in fixed device tensors: the input token and its
position (`DecodeStep.token`, `.pos`), the caches (updated in place) and the weights. Shapes
never depend on data and nothing waits for the device: no `.item()`, no `nonzero`, no Python
branch on a tensor's value. Attention reads the first `span` cached positions, a bucket of the
context length (256, 512, ... up to the cache size) chosen on the host, and a mask built on the
device from `pos` hides the keys after the token; so one graph per (cache, span) serves every
position, and all of them are captured at most once.

The same step runs everywhere: eagerly on the CPU (every oracle test and `score --stepwise`
go through it), on the meta device (`decode-check`, where a host sync or a data-dependent
shape would raise), and replayed as a CUDA graph (cuda_graphs.py) on a GPU.

Sampling happens on the device too (`DeviceSampler`), and the sampled token feeds the next step
without a round trip: the host learns it from a pinned copy read after the next step is queued.
A few values computed on the device beside the token (the Auto depth's signals, log-probabilities)
can ride along:
copied out with it and read in the same wait, so the host still syncs once per token.

    step = model.decoder(name, cache)
    logits = step.forward_token(17)      # a host-known token (prefill of one, score --stepwise)
    step.send(sampler.on_device(logits)) # a device token: copy out, queue the step
    token = step.receive()               # the token id, read while the step runs
    step.send(token_tensor, signals)     # also copy out `signals` (a small fp32 vector)...
    step.receive(); step.signals         # ...read with the token: a tuple of floats
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import attention_step
from .cache import SequenceCache
from .checkpoint.config import ATTENTION, MAMBA, MLP, ModelConfig
from .checkpoint.weights import ModelWeights
from .cuda_graphs import GraphSet
from .dequant import prepare as prepare_tables
from .errors import ElasticError, UsageError
from .mamba import mamba_step
from .matmul import linear
from .moe import grouped_experts, mlp, moe_gathered

MIN_SPAN = 256  # the smallest attention bucket: short contexts share one graph
# Values that may ride back with a token (DecodeStep.send): Auto's two signals and a token's
# log-probability with up to 20 alternatives (ids and log-probabilities: runtime/logprobs.py)
SIGNAL_SLOTS = 64


def span_for(length: int, max_len: int) -> int:
    """Keys attention reads for a token at position length-1: the next power of two (>= MIN_SPAN)."""
    span = MIN_SPAN
    while span < length:
        span *= 2
    return min(span, max_len)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in fp32 (weight multiply included), cast back to x's dtype."""
    xf = x if x.dtype == torch.float32 else x.float()
    out = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))
    return out if out.dtype == x.dtype else out.to(x.dtype)


def step_logits(cfg: ModelConfig, w: ModelWeights, cache: SequenceCache, token: torch.Tensor, pos: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
    """The step itself: token (1,) at position pos (1,) -> fp32 logits (1, vocab); caches advance in place.
    `positions` is arange(span): attention reads that many cached keys."""
    x = F.embedding(token, w.embed).to(w.norm_f.dtype)  # (1, hidden); the table may be narrower (widen.py)
    dtype = x.dtype
    # 0 for the keys up to the token, -inf after it: one mask for every attention layer.
    mask = torch.where(positions <= pos, 0.0, float("-inf")).to(dtype)[None]  # (1, span)
    for layer, state in zip(w.layers, cache.layers):
        y = rms_norm(x, layer.norm, cfg.layer_norm_epsilon)
        if layer.kind == MAMBA:
            y = mamba_step(y, layer.mixer, state, cfg)
        elif layer.kind == ATTENTION:
            y = attention_step(y, layer.mixer, state, pos, mask, cfg)
        elif layer.kind == MLP:
            y = mlp(y, layer.mixer)
        else:
            y = moe_gathered(y, layer.mixer, cfg)
        x = x + y
    return linear(rms_norm(x, w.norm_f, cfg.layer_norm_epsilon), w.lm_head).float()


class DecodeStep:
    """One cache's decode step: its fixed input buffers, its graphs, and the host's view of it."""

    def __init__(self, cfg: ModelConfig, weights: ModelWeights, cache: SequenceCache, device: torch.device,
                 graphs: GraphSet, eager: str | None = None):
        """`eager`: why this step never runs as a graph even where graphs are on (routed experts in RAM)."""
        self.cfg, self.weights, self.cache, self.device = cfg, weights, cache, torch.device(device)
        self.token = torch.zeros(1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.positions = torch.arange(cache.max_len, device=device)
        self.runner = graphs.runner(eager)
        grouped_experts(self.device, weights.norm_f.dtype)  # decided now, outside any capture
        prepare_tables(self.device, weights.norm_f.dtype)  # a graph cannot copy them to the device
        cuda = self.device.type == "cuda"
        self.host = torch.zeros(1, dtype=torch.long, pin_memory=cuda)  # the sampled token, copied out
        self.host_signals = torch.zeros(SIGNAL_SLOTS, dtype=torch.float32, pin_memory=cuda)  # sent with it
        self.sent_signals: torch.Tensor | None = None
        self.signals: tuple[float, ...] | None = None  # the last received token's signals (None: none sent)
        self.copied = torch.cuda.Event() if cuda else None
        self.pending = False  # a token was sent and not yet received
        self.logits: torch.Tensor | None = None  # the last step's output (a fixed buffer under graphs)

    def _run(self) -> torch.Tensor:
        """Runs the step for the token in `self.token` at the cache's current length."""
        pos = self.cache.length
        if pos >= self.cache.max_len:
            raise UsageError(f"the context is full ({self.cache.max_len} tokens)")
        span = span_for(pos + 1, self.cache.max_len)
        positions = self.positions[:span]
        with torch.inference_mode():
            self.pos.fill_(pos)
            self.logits = self.runner.run(span, lambda: step_logits(self.cfg, self.weights, self.cache, self.token,
                                                                    self.pos, positions))
        return self.logits

    def forward_token(self, token: int) -> torch.Tensor:
        """Runs a token the host knows; returns the logits buffer (valid until the next step)."""
        if self.pending:
            raise RuntimeError("a sent token was not received")
        if token < 0:
            raise InvalidLogits()
        with torch.inference_mode():
            self.token.fill_(token)
        logits = self._run()
        self.cache.tokens.append(token)
        return logits

    def send(self, token: torch.Tensor, signals: torch.Tensor | None = None) -> torch.Tensor:
        """Queues the step for a device token ((1,) long, e.g. just sampled): the token (and `signals`,
        a small fp32 vector computed beside it) is copied to pinned memory first, so `receive` can read
        it while the step runs. Returns the logits buffer."""
        if self.pending:
            raise RuntimeError("a sent token was not received")
        with torch.inference_mode():
            self.sent = token.reshape(1)
            if signals is not None and signals.numel() > SIGNAL_SLOTS:
                raise ValueError(f"at most {SIGNAL_SLOTS} signals ride with a token")
            self.sent_signals = signals
            if self.copied is not None:
                self.host.copy_(self.sent, non_blocking=True)
                if signals is not None:
                    self.host_signals[:signals.numel()].copy_(signals.reshape(-1), non_blocking=True)
                self.copied.record()  # one event for both copies: `receive` waits once
            # A sampler marks logits that are not finite with -1 (see DeviceSampler): the host learns
            # it from the copy, the embedding never sees it.
            torch.clamp(self.sent, min=0, out=self.token)
        logits = self._run()
        self.pending = True
        return logits

    def receive(self) -> int:
        """The token id of the last `send`, now part of the cache's sequence."""
        if not self.pending:
            raise RuntimeError("nothing was sent")
        self.pending = False
        signals = self.sent_signals
        if self.copied is not None:
            self.copied.synchronize()  # waits for the sampler, not for the step queued after it
            token = int(self.host[0])
            signals = self.host_signals[:signals.numel()] if signals is not None else None
        elif self.device.type == "meta":
            token, signals = 0, None  # no values on the meta device; the sequence length is what matters there
        else:
            token = int(self.sent[0])
        self.signals = None if signals is None else tuple(signals.tolist())
        if token < 0:
            raise InvalidLogits()
        self.cache.tokens.append(token)
        return token


class InvalidLogits(ElasticError):
    def __init__(self):
        super().__init__("the model computed invalid numbers (NaN, or no token left possible): "
                         "its weights may be damaged; verify the checkpoint (python -m runtime models verify DIR) "
                         "or download it again")


