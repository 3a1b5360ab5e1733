"""The first token of a short prompt on the full 128-expert file against the bytes its prefill must read,
and the longest prompt whose first token can come within 2 decode steps.

    python benchmarks/first_token_bound.py --checkpoint /work/scratch/nvfp4-full [--threads 1] [--json F]

The arithmetic: a prefill reads each weight once, but of the routed experts only those its tokens chose
(moe.py groups a chunk's tokens by expert, each chosen expert read once); a decode step reads k of E.
With D the bytes every token reads (all but the embedding table and the routed experts), r an embedding
row, x_l the bytes of one expert of MoE layer l and t_l(n) the experts n tokens touch there, at the same
speed per byte a prompt of n tokens costs (D + n*r + sum_l t_l(n)*x_l) / (D + r + k*sum_l x_l) steps.

The measurement: loads the checkpoint on the CPU, prefills the one-word chat prompt while recording each
token's experts in every MoE layer (token i's routing does not depend on later tokens, so the first n
rows are exactly what a prompt of those n tokens touches), and takes n* = the longest prefix whose bound
is 2 steps or less. Then it times a prefill of those n* tokens from an empty cache and 2 decode steps
after it. For comparison, the bound with routing spread evenly (E * (1 - (1 - k/E)^n) experts touched).
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from json_lines import emit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench_real_layout import memory, prefill_bytes, step_bytes  # noqa: E402 (after the path)


class RoutingRecorder:
    """Each MoE layer's chosen experts, token by token in prompt order (wraps runtime.moe.route; layers
    are told apart by their router weights, numbered in order of use)."""

    def __init__(self):
        import runtime.moe as moe

        self.moe, self.route = moe, moe.route
        self.rows: dict[int, list[list[int]]] = {}
        order: dict[int, int] = {}

        def route(x, w, cfg):
            ids, weights = self.route(x, w, cfg)
            layer = order.setdefault(w.router.data_ptr(), len(order))
            self.rows.setdefault(layer, []).extend(ids.reshape(ids.shape[0], -1).tolist())
            return ids, weights

        moe.route = route

    def stop(self):
        self.moe.route = self.route

    def touched(self, n: int) -> dict[int, int]:
        """The n-th MoE layer -> the distinct experts the first n tokens chose there."""
        return {layer: len({e for row in rows[:n] for e in row}) for layer, rows in self.rows.items()}


def even_touched(experts: int, active: int, n: int) -> float:
    """Experts n tokens touch a layer when each picks `active` of `experts` evenly at random."""
    return experts * (1 - (1 - active / experts) ** n)


def child(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from runtime.chat_format import ChatFormat
    from runtime.checkpoint.check import inspect_checkpoint
    from runtime.checkpoint.config import MOE
    from runtime.engine import Engine

    folder = Path(args.checkpoint)
    checked = inspect_checkpoint(folder)  # the headers, read once for all the arithmetic below
    cfg = checked.config
    step_reads = step_bytes(folder, checked)
    t0 = time.perf_counter()
    engine = Engine.load(folder, device="cpu", max_context=1024)
    load_s = time.perf_counter() - t0
    name = engine.submodels_by_size()[-1]
    prompt = ChatFormat(folder).prompt_ids([{"role": "user", "content": "Hello"}], False)
    recorder = RoutingRecorder()
    with torch.inference_mode():
        t0 = time.perf_counter()
        engine.catch_up(name, prompt, scope="whole")
        whole_ms = (time.perf_counter() - t0) * 1000
    recorder.stop()
    curve = []
    for n in range(1, len(prompt) + 1):
        touched = recorder.touched(n)
        curve.append({"tokens": n, "experts_touched": round(sum(touched.values()) / len(touched), 1),
                      "bound_steps": round(prefill_bytes(folder, n, touched, checked) / step_reads, 2)})
    within = [c["tokens"] for c in curve if c["bound_steps"] <= 2]
    short = max(within) if within else 1
    with torch.inference_mode():
        t0 = time.perf_counter()
        _, logits = engine.catch_up(name, prompt[:short], scope="short")  # another scope: an empty cache
        short_ms = (time.perf_counter() - t0) * 1000
        token, step, steps = int(logits.argmax()), engine.decoder(name), []
        for _ in range(2):
            t0 = time.perf_counter()
            token = int(step.forward_token(token).argmax())
            steps.append(time.perf_counter() - t0)
    step_s = min(steps)
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    moe_layers = len(cfg.layers_of(MOE))
    layers = range(moe_layers)
    even = [{"tokens": n, "experts_touched": round(even_touched(E, k, n), 1),
             "bound_steps": round(prefill_bytes(folder, n, dict.fromkeys(layers, even_touched(E, k, n)), checked)
                                  / step_reads, 2)} for n in range(1, 65)]
    even_within = [c["tokens"] for c in even if c["bound_steps"] <= 2]
    every_token = prefill_bytes(folder, 0, dict.fromkeys(layers, 0), checked)  # D
    row = prefill_bytes(folder, 1, dict.fromkeys(layers, 0), checked) - every_token  # r
    expert = prefill_bytes(folder, 0, dict.fromkeys(layers, 1), checked) - every_token  # sum_l x_l
    return {
        "checkpoint": str(folder),
        "submodel": name,
        "threads": args.threads,
        "experts": E,
        "active": k,
        "moe_layers": moe_layers,
        "load_s": round(load_s, 2),
        "step_read_bytes": step_reads,
        "prompt_tokens": len(prompt),
        "every_token_bytes": every_token,
        "embedding_row_bytes": row,
        "one_expert_every_layer_bytes": expert,
        "touched_within_2_steps": round((2 * step_reads - every_token - row) / expert, 1),  # a layer, 1 token
        "whole_prompt_first_token_ms": round(whole_ms, 1),
        "whole_prompt_bound_steps": curve[-1]["bound_steps"],
        "curve": curve,
        "even_routing": [c for c in even if c["tokens"] in (1, 2, 4, 6, 8, 16, 32, 64)],
        "even_routing_longest_within_2_steps": max(even_within) if even_within else 0,
        "longest_prompt_within_2_steps": short if within else 0,
        "short_prompt_first_token_ms": round(short_ms, 1),
        "decode_step_ms": [round(s * 1000, 1) for s in steps],
        "short_prompt_first_token_in_steps": round(short_ms / 1000 / step_s, 2),
        "whole_prompt_first_token_in_steps": round(whole_ms / 1000 / step_s, 2),
        "memory_end": memory(),
        "load_average": os.getloadavg(),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="append the result to this JSON-lines file")
    args = p.parse_args()
    result = child(args)
    emit(result, args.json)


if __name__ == "__main__":
    main()
