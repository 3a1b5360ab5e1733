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
A few values computed on the device beside the token (the Auto depth's signals) can ride along:
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

from .cache import SequenceCache
from .config import ATTENTION, MAMBA, MLP, ModelConfig
from .attention import attention_step
from .cuda_graphs import GraphSet
from .errors import ElasticError, UsageError
from .mamba import mamba_step
from .matmul import linear
from .moe import grouped_experts, mlp, moe_gathered
from .sampling import SamplingSettings
from .weights import ModelWeights

MIN_SPAN = 256  # the smallest attention bucket: short contexts share one graph
SIGNAL_SLOTS = 4  # values that may ride back with a token (DecodeStep.send)


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
    x = F.embedding(token, w.embed)  # (1, hidden)
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
                 graphs: GraphSet):
        self.cfg, self.weights, self.cache, self.device = cfg, weights, cache, torch.device(device)
        self.token = torch.zeros(1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.positions = torch.arange(cache.max_len, device=device)
        self.runner = graphs.runner()
        grouped_experts(self.device, weights.embed.dtype)  # decided now, outside any capture
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


def token_signals(logits: torch.Tensor) -> torch.Tensor:
    """The Auto depth's signals of softmax(logits), in auto_depth.Signals order (entropy in nats, doubt =
    1 - the top probability), as a (2,) fp32 device tensor, with no host sync. Tokens masked with -inf
    count as impossible (entr(0) = 0)."""
    probs = torch.softmax(logits.reshape(-1).float(), dim=-1)
    return torch.stack([torch.special.entr(probs).sum(), 1 - probs.max()])


class InvalidLogits(ElasticError):
    def __init__(self):
        super().__init__("the model computed invalid numbers (NaN, or no token left possible): its weights may be damaged; "
                         "verify the checkpoint (python -m runtime models verify DIR) or download it again")


class DeviceSampler:
    """Samples on the device: greedy, or temperature with top-k, top-p and min-p and a device
    generator (a fixed seed repeats exactly). `on_device` returns a (1,) long tensor without a
    host sync; calling the sampler returns the id on the host (the `make_sampler` protocol)."""

    def __init__(self, settings: SamplingSettings, device: torch.device | str = "cpu"):
        self.settings = settings.check()
        device = torch.device(device)
        self.generator = None
        if settings.temperature > 0 and device.type != "meta":  # meta has no generator (and no values)
            self.generator = torch.Generator(device=device)
            if settings.seed is None:
                self.generator.seed()
            else:
                self.generator.manual_seed(settings.seed)

    @torch.inference_mode()
    def on_device(self, logits: torch.Tensor) -> torch.Tensor:
        s = self.settings
        logits = raw = logits.reshape(-1).float()  # (vocab,)
        if s.temperature == 0:
            return self._mark_invalid(raw, logits.argmax().reshape(1))
        logits = logits / s.temperature
        if s.top_k and s.top_k < logits.numel():
            kth = torch.topk(logits, s.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if s.top_p < 1:
            sorted_probs, order = probs.sort(descending=True)
            drop = (sorted_probs.cumsum(0) - sorted_probs) >= s.top_p  # the tokens before already cover top_p
            probs = probs.scatter(0, order, sorted_probs.masked_fill(drop, 0))
        if s.min_p > 0:
            probs = probs.masked_fill(probs < s.min_p * probs.max(), 0)
        # argmax of p / E with E ~ Exp(1) picks token i with probability p_i (the exponential race),
        # with no normalisation and no host-side search.
        race = torch.empty_like(probs).exponential_(generator=self.generator).clamp_(min=1e-30)
        return self._mark_invalid(raw, (probs / race).argmax().reshape(1))

    @staticmethod
    def _mark_invalid(logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """-1 instead of a token when the logits hold NaN (damaged weights) or rule out every token,
        decided on the device so the step never waits for the host; `DecodeStep.receive` turns it into
        an error. -inf alone is fine: logits processors and samplers mask tokens with it."""
        return token.masked_fill(torch.isnan(logits).any() | ~(logits > float("-inf")).any(), -1)

    def __call__(self, logits: torch.Tensor) -> int:
        return int(self.on_device(logits))
