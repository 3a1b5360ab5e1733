"""Trains the bundled demo model: a tiny elastic NemotronH, following Nemotron Elastic in small.

    python -m training.train_demo --out assets/demo            # about 30 minutes on 2 CPU cores
    python -m training.train_demo --out /tmp/demo --smoke       # a few steps, for the tests

1. Train the parent (Mamba-2, attention and MoE layers with a shared expert) on the synthetic
   data in data.py.
2. Rank hidden channels, Mamba heads (within groups), experts and FFN channels by activation
   importance and permute the weights so the important ones come first (importance.py).
3. Train all submodels jointly: every step trains the parent and one sampled submodel, which
   also distils from the parent's output distribution.
4. Write the checkpoint in the hub layout: config.json, elastic.json, model.safetensors (fp32),
   tokenizer files with the chat template, generation_config.json.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from runtime.chat_format import ChatFormat
from runtime.config import PATTERN_LETTERS
from runtime.elastic import count_params, parse_elastic

from .data import corpus, training_examples
from .importance import measure, permute_by_importance
from .model import TrainableModel, hub_tensors, scratch_dir
from .tokenizer import build_tokenizer

PATTERN = "MEM*EMEM*E"
CONFIG = dict(
    vocab_size=512, hidden_size=128, layers_block_type=[PATTERN_LETTERS[c] for c in PATTERN],
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, chunk_size=32,
    n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=96, moe_shared_expert_intermediate_size=192,
    routed_scaling_factor=2.5, n_group=1, topk_group=1, norm_topk_prob=True, intermediate_size=256,
    max_position_embeddings=2048, bos_token_id=1, eos_token_id=4, pad_token_id=0,
)
# Widths of the two nested submodels; active parameters come out near 30 : 23 : 12. Every width
# that becomes a matmul's input side is a multiple of 16, so NVFP4's 16-wide blocks slice cleanly.
SUBMODELS = [
    dict(hidden_size=112, mamba_num_heads=6, n_routed_experts=6, moe_intermediate_size=80,
         moe_shared_expert_intermediate_size=176),
    dict(hidden_size=80, mamba_num_heads=4, n_routed_experts=6, moe_intermediate_size=48,
         moe_shared_expert_intermediate_size=96),
]
MAX_LEN = 160
MAX_THINKING_TOKENS = 96


def encode(chat: ChatFormat, example) -> tuple[list[int], list[int]]:
    """Token ids of prompt + reply, and a mask marking the reply tokens (the ones trained on)."""
    thinking = example.thinking is not None
    prompt = chat.prompt_ids(list(example.messages), enable_thinking=thinking)
    reply = (f"{example.thinking}\n</think>\n" if thinking else "") + example.answer + "<|im_end|>"
    target = chat.encode(reply)
    ids = (prompt + target)[:MAX_LEN]
    return ids, ([0] * len(prompt) + [1] * len(target))[:MAX_LEN]


def batches(chat: ChatFormat, seed: int, batch_size: int):
    stream = training_examples(seed)
    while True:
        rows = [encode(chat, next(stream)) for _ in range(batch_size)]
        width = max(len(ids) for ids, _ in rows)
        ids = torch.zeros(batch_size, width, dtype=torch.long)
        mask = torch.zeros(batch_size, width, dtype=torch.bool)
        for r, (i, m) in enumerate(rows):
            ids[r, :len(i)] = torch.tensor(i)
            mask[r, :len(m)] = torch.tensor(m, dtype=torch.bool)
        yield ids, mask


def lm_loss(logits, ids, mask):
    target, keep = ids[:, 1:], mask[:, 1:]
    return F.cross_entropy(logits[:, :-1][keep], target[keep])


def distill_loss(student, teacher, mask):
    keep = mask[:, 1:]
    s = F.log_softmax(student[:, :-1][keep], -1)
    t = F.log_softmax(teacher[:, :-1][keep], -1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean")


def schedule(step, total, peak, warmup=60):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def initial_checkpoint(folder: Path, seed: int) -> None:
    from transformers import NemotronHConfig, NemotronHForCausalLM

    torch.manual_seed(seed)
    config = NemotronHConfig(**CONFIG)
    model = NemotronHForCausalLM(config)
    model.save_pretrained(folder)


def elastic_table(cfg) -> dict:
    entries = [{"name": "parent"}] + [{"name": f"sub{k}", **w} for k, w in enumerate(SUBMODELS)]
    subs = parse_elastic({"format": "elastic-nemotron-h/1", "submodels": entries}, cfg)
    for entry, sub in zip(entries, subs):
        entry["name"] = f"{count_params(cfg, sub).total / 1e6:.1f}M"
    return {"format": "elastic-nemotron-h/1", "max_thinking_tokens": MAX_THINKING_TOKENS, "submodels": entries}


def train(tm, chat, seed, steps, batch_size, lr, names, log, elastic: bool):
    params = tm.parameters()
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    data = batches(chat, seed, batch_size)
    rng = random.Random(seed)
    parent, subs = names[0], names[1:]
    started = time.time()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = schedule(step, steps, lr)
        ids, mask = next(data)
        logits = tm.forward(parent, ids)
        loss = lm_loss(logits, ids, mask)
        if elastic:
            sub = rng.choices(subs, weights=[0.5] * len(subs))[0]
            student = tm.forward(sub, ids)
            loss = loss + distill_loss(student, logits.detach(), mask) + 0.5 * lm_loss(student, ids, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"{'elastic' if elastic else 'parent'} step {step}/{steps} loss {loss.item():.4f} "
                f"({time.time() - started:.0f} s)")


def build(out: Path, seed: int, parent_steps: int, elastic_steps: int, batch_size: int, lr: float, log=print):
    out = Path(out)
    work = scratch_dir()
    try:
        build_tokenizer(corpus(seed), CONFIG["vocab_size"], work)
        initial_checkpoint(work, seed)
        chat = ChatFormat(work)
        from runtime.config import load_config

        cfg = load_config(work)
        table = elastic_table(cfg)
        (work / "elastic.json").write_text(json.dumps(table, indent=2) + "\n")
        names = [s["name"] for s in table["submodels"]]
        tm = TrainableModel.from_checkpoint(work)

        train(tm, chat, seed, parent_steps, batch_size, lr, names, log, elastic=False)
        calib = batches(chat, seed + 7, batch_size)
        stats = measure(tm, [next(calib) for _ in range(4)])
        permute_by_importance(tm, stats)
        log("permuted the parent's components by importance")
        train(tm, chat, seed + 1, elastic_steps, batch_size, lr / 2, names, log, elastic=True)

        save_file(hub_tensors(cfg, tm.weights, tm.a_logs), str(work / "model.safetensors"), metadata={"format": "pt"})
        (work / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": 1, "eos_token_id": [4], "pad_token_id": 0, "do_sample": True, "temperature": 0.6,
             "top_p": 0.95}, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for name in ("config.json", "elastic.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                     "generation_config.json"):
            shutil.copy2(work / name, out / name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"wrote {out}")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.train_demo")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parent-steps", type=int, default=1200)
    parser.add_argument("--elastic-steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--smoke", action="store_true", help="a few steps only (tests)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    if args.smoke:
        args.parent_steps, args.elastic_steps, args.batch_size = 3, 3, 4
    build(args.out, args.seed, args.parent_steps, args.elastic_steps, args.batch_size, args.lr)


if __name__ == "__main__":
    main()
