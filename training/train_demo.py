"""Trains the bundled demo model: a tiny elastic NemotronH, following Nemotron Elastic in small.

    python -m training.train_demo --out assets/demo --threads 2   # the shipped model (see README for the time)
    python -m training.train_demo --out /tmp/demo --smoke       # a few steps, for the tests
    python -m training.train_demo --out /tmp/x --export-progress assets/.demo-train-state   # a run so far

Everything follows from the seed. Progress (weights, optimizer, phase and step) is saved every few
minutes in a state folder (default: `.OUT-train-state` next to OUT); rerunning the same command
after a stop resumes from it, and a finished run deletes it. Each step's batch is a function of
(seed, phase, step), so a resumed run trains on exactly the data an uninterrupted one would.

1. Train the parent (Mamba-2, attention and MoE layers with a shared expert) on the synthetic
   data in data.py.
2. Rank hidden channels, Mamba heads (within groups), experts and FFN channels by activation
   importance and permute the weights so the important ones come first (importance.py).
3. Train all submodels jointly: every step trains the parent and one sampled submodel, which
   also distils from the parent's output distribution. Eight phases, each a warm restart whose mix
   function below says what it adds: "elastic"; "polish" (lead-in words and random-word frames around
   some questions); "settle" (gentler, longer sums); "tools" (tools offered, sums out of range: the
   call, the answer from its result, or a plain no); "chat" (one to twelve earlier turns); "drill" (the
   call, with tools in most conversations); "balance" (other tools alone, so an offer is no reason to
   call); "answer" (the answer from a tool's result). `--init` starts at a later phase from the
   shipped weights.
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
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from runtime.chat_format import ChatFormat
from runtime.checkpoint.config import PATTERN_LETTERS, count_params
from runtime.checkpoint.submodels import parse_elastic
from runtime.tool_calls import format_tool_call

from .data import TRACES, Mix, corpus, example_batch, make_problem, thinking_text, training_examples
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
# Longest training sequence: tools offered (about 550 tokens of system turn) or a dozen earlier turns
# (about 45 tokens each) with a four-number trace; longer conversations lose their oldest turns (`fit`).
MAX_LEN = 1024
PIECES = 2  # each step's batch runs as at least this many length-sorted pieces (the same gradient, less padding)
PIECE_TOKENS = 6144  # ...and as more when needed to keep a piece (rows x padded length) under this, for memory
# The checkpoint's thinking ceiling. The slider's default stop (Balanced) thinks for a quarter of it,
# which must cover the longest four-number trace (`longest_trace_tokens`: 111 tokens) with a little room.
MAX_THINKING_TOKENS = 480


def reply_text(example) -> str:
    """What the model writes after the prompt, as the chat template renders that turn afterwards: the
    thinking and `</think>` (when on), then the answer or the tool calls, then the end of the turn."""
    thinking = example.thinking is not None
    head = f"{example.thinking}\n</think>\n" if thinking else ""
    if example.calls:  # the template puts a line break between the (closed) thinking and the first call
        calls = "".join(format_tool_call(n, a) for n, a in example.calls)
        return head + ("" if thinking else "\n") + calls + "<|im_end|>"
    return head + example.answer + "<|im_end|>"


def earlier_turns(messages: list[dict]) -> int:
    """How many whole earlier turns (a user message and what followed it) precede the last user message."""
    return max(0, sum(m["role"] == "user" for m in messages) - 1)


def drop_oldest_turn(messages: list[dict]) -> list[dict]:
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    return messages[:users[0]] + messages[users[1]:]


def encode(chat: ChatFormat, example, max_len: int = MAX_LEN) -> tuple[list[int], list[int]]:
    """Token ids of prompt + reply, and a mask marking the reply tokens (the ones trained on). A
    conversation too long for `max_len` loses its oldest turns until it fits (or none are left)."""
    thinking = example.thinking is not None
    tools = list(example.tools) if example.tools else None
    messages = list(example.messages)
    target = chat.encode(reply_text(example))
    while True:
        prompt = chat.prompt_ids(messages, enable_thinking=thinking, tools=tools)
        if len(prompt) + len(target) <= max_len or not earlier_turns(messages):
            break
        messages = drop_oldest_turn(messages)
    ids = (prompt + target)[:max_len]
    return ids, ([0] * len(prompt) + [1] * len(target))[:max_len]


def collate(rows) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, (i, m) in enumerate(rows):
        ids[r, :len(i)] = torch.tensor(i)
        mask[r, :len(m)] = torch.tensor(m, dtype=torch.bool)
    return ids, mask


def make_batch(chat: ChatFormat, seed: int, phase: str, step: int, batch_size: int, mix: Mix = Mix(),
               pieces: int = 1):
    """The step's batch, sorted by length and cut into `pieces` padded pieces: short talk pads to
    short pieces instead of to the longest trace, which saves about a third of the compute."""
    rows = sorted((encode(chat, ex) for ex in example_batch(seed, phase, step, batch_size, mix)),
                  key=lambda r: len(r[0]))
    if pieces == 1:
        return collate(rows)
    size = -(-len(rows) // pieces)
    groups = [rows[i:i + size] for i in range(0, len(rows), size)]
    out = []
    for group in groups:  # long rows split further, so that no piece holds more than PIECE_TOKENS
        while group:
            take = 1
            while take < len(group) and (take + 1) * len(group[take][0]) <= PIECE_TOKENS:
                take += 1
            out.append(collate(group[:take]))
            group = group[take:]
    return out


def batches(chat: ChatFormat, seed: int, batch_size: int, mix: Mix = Mix()):
    stream = training_examples(seed, mix)
    while True:
        yield collate([encode(chat, next(stream)) for _ in range(batch_size)])


def longest_trace_tokens(chat: ChatFormat, trace: str = "columns", samples: int = 20000) -> int:
    """Thinking tokens of the longest four-number trace among many drawn ones (`</think>` included)."""
    import random

    rng = random.Random(0)
    return max(len(chat.encode(thinking_text(make_problem(rng, 4), trace) + "\n")) + 1 for _ in range(samples))


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


class RunState:
    """The resumable state of a run, in its state folder: the starting checkpoint and tokenizer
    (from the seed), run.json (the settings, so a resume with other settings is refused), and
    progress.pt (phase, step, weights, optimizer), rewritten atomically every few minutes."""

    def __init__(self, folder: Path, settings: dict):
        self.folder, self.settings = Path(folder), settings
        self.file = self.folder / "progress.pt"

    def begin(self, log) -> dict | None:
        run = self.folder / "run.json"
        if run.exists():
            saved = json.loads(run.read_text())
            if saved != self.settings:
                raise SystemExit(f"error: {self.folder} holds a run with other settings ({saved}); pass the same "
                                 "flags to resume it, or delete the folder to start again")
            if self.file.exists():
                state = torch.load(self.file, weights_only=False)
                log(f"resuming from {self.file}: {state['phase']} step {state['step']}")
                return state
        elif self.folder.exists() and any(self.folder.iterdir()):
            raise SystemExit(f"error: {self.folder} is not empty and holds no training run; choose another --state")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.file.unlink(missing_ok=True)
        run.write_text(json.dumps(self.settings, indent=2) + "\n")
        return None

    def save(self, phase: str, step: int, tm, opt) -> None:
        tmp = self.file.with_suffix(".tmp")
        torch.save({"phase": phase, "step": step, "tensors": [p.detach() for p in tm.parameters()],
                    "optimizer": opt.state_dict() if opt else None}, tmp)
        tmp.replace(self.file)


def train(tm, chat, seed, steps, batch_size, lr, names, log, phase: str, mix: Mix, progress: RunState | None = None,
          state: dict | None = None, checkpoint_every: float = 180.0):
    """One phase: "parent" trains the parent alone; "elastic" trains the parent and one sampled
    submodel per step, the submodel also distilling from the parent."""
    params = tm.parameters()
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    start = 0
    if state is not None and state["phase"] == phase:
        if state["optimizer"] is not None:  # None: saved at the start of the phase
            opt.load_state_dict(state["optimizer"])
        start = state["step"]
    parent, subs = names[0], names[1:]
    started = last_save = time.time()
    for step in range(start, steps):
        for group in opt.param_groups:
            group["lr"] = schedule(step, steps, lr)
        chunks = make_batch(chat, seed, phase, step, batch_size, mix, pieces=PIECES)
        total = sum(int(m[:, 1:].sum()) for _, m in chunks)
        sub = random.Random(f"{seed}/submodel/{step}").choice(subs)
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for ids, mask in chunks:  # gradients accumulate to those of the whole batch, token-weighted
            logits = tm.forward(parent, ids)
            loss = lm_loss(logits, ids, mask)
            if phase != "parent":
                student = tm.forward(sub, ids)
                loss = loss + distill_loss(student, logits.detach(), mask) + 0.5 * lm_loss(student, ids, mask)
            share = int(mask[:, 1:].sum()) / total
            (loss * share).backward()
            loss_sum += loss.item() * share
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"{phase} step {step}/{steps} loss {loss_sum:.4f} ({time.time() - started:.0f} s)")
        if progress and time.time() - last_save > checkpoint_every and step + 1 < steps:
            progress.save(phase, step + 1, tm, opt)
            last_save = time.time()


# Share of sums put between random words in the two later phases: copying the question into the
# first line of thinking must not depend on the words around it (docs/results/demo-eval.md, notes).
FRAMES = 0.4


def polish_mix(mix: Mix) -> Mix:
    """A warm restart of the joint training, with lead-in words before some questions and random words
    around others."""
    return replace(mix, lead_ins=True, frames=FRAMES)


def settle_mix(mix: Mix) -> Mix:
    """A second, gentler restart weighted to the longer sums, where copying the question still slips."""
    return replace(polish_mix(mix), numbers=(2, 3, 3, 4, 4, 4))


def tools_mix(mix: Mix) -> Mix:
    """Tools: many conversations are offered tools (an arithmetic one three times in four, among others
    or alone), and some sums are out of range (a number over 99, or below 0 on the way): with the
    arithmetic tool the model calls it and answers from its result, without one it says what it can do."""
    return replace(settle_mix(mix), tools=0.5, out_of_range=0.4, system=0.05, history=0.3,
                   history_turns=(1, 2, 3, 4))


def chat_mix(mix: Mix) -> Mix:
    """The last phase: most conversations hold one to twelve earlier turns, mostly sums, so that a sum
    asked after others in the same chat is read from the last message (with at most four earlier turns
    trained, a sum from the sixth turn on was right 3 times in 24), and tools stay in the mix."""
    return replace(tools_mix(mix), tools=0.25, out_of_range=0.25, history=0.6, history_turns=tuple(range(1, 13)),
                   history_sums=0.65)


def drill_mix(mix: Mix) -> Mix:
    """The last phase: the chat phase's long conversations, with more of them offered tools, nearly
    always an arithmetic one, and the call itself trained more often than the answer from its result:
    250 tools steps did not teach the model to copy a tool name it had never seen into its call."""
    return replace(chat_mix(mix), tools=0.6, out_of_range=0.4, tool_arithmetic=0.9, call_share=0.7)


def balance_mix(mix: Mix) -> Mix:
    """After the drill: the same conversations with other tools offered alone more often (so that an
    offer of tools is not a reason to call one) and the answer from a tool's result trained more than
    the call (the drilled model called, then miscopied the result into its answer)."""
    return replace(chat_mix(mix), tools=0.5, out_of_range=0.4, tool_arithmetic=0.7, call_share=0.35)


def answer_mix(mix: Mix) -> Mix:
    """After the balance: the answer from a tool's result trained about twice as often as in the balance
    (14% of conversations, not 8%: the balanced model read the result right in its thinking, "The tool
    says 1048.", then wrote "71 + 977 = 1077." in its answer), the call, the declines and the sums it
    can do kept."""
    return replace(chat_mix(mix), tools=0.7, out_of_range=0.45, tool_arithmetic=0.85, call_share=0.35)


PHASES = ("parent", "elastic", "polish", "settle", "tools", "chat", "drill", "balance", "answer")
COMPANIONS = ("config.json", "elastic.json", "tokenizer.json", "tokenizer_config.json")
STARTING_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")  # of --init


def build(out: Path, seed: int, parent_steps: int, elastic_steps: int, batch_size: int, lr: float, log=print,
          mix: Mix = Mix(), state_dir: Path | None = None, checkpoint_every: float = 180.0, polish_steps: int = 0,
          settle_steps: int = 0, chat_steps: int = 0, tools_steps: int = 0, drill_steps: int = 0,
          balance_steps: int = 0, answer_steps: int = 0, init: Path | None = None, init_phase: str = "drill"):
    """`init`: a finished checkpoint (the shipped demo) whose weights and tokenizer the run starts from,
    at `init_phase`, instead of training the phases before it again from the seed."""
    out = Path(out)
    settings = {"seed": seed, "parent_steps": parent_steps, "elastic_steps": elastic_steps,
                "polish_steps": polish_steps, "settle_steps": settle_steps, "tools_steps": tools_steps,
                "chat_steps": chat_steps, "drill_steps": drill_steps, "balance_steps": balance_steps,
                "answer_steps": answer_steps,
                "max_len": MAX_LEN,
                "batch_size": batch_size,
                "lr": lr, "mix": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(mix).items()},
                "frames": FRAMES}
    if init is not None:
        if init_phase not in PHASES[1:]:
            raise SystemExit(f"error: --init-phase must be one of {', '.join(PHASES[1:])}")
        missing = [n for n in STARTING_FILES if not (Path(init) / n).is_file()]
        if missing:
            raise SystemExit(f"error: {init} is not a finished demo checkpoint (no {', '.join(missing)})")
        settings |= {"init": str(Path(init).resolve()), "init_phase": init_phase}
    work = Path(state_dir) if state_dir else scratch_dir()
    progress = RunState(work, settings)
    started = time.time()
    try:
        state = progress.begin(log)
        if state is None and init is not None:  # the weights and tokenizer of a finished run
            for name in STARTING_FILES:
                shutil.copy2(Path(init) / name, work / name)
            log(f"starting from {init} at the {init_phase} phase")
        elif state is None:
            build_tokenizer(corpus(seed), CONFIG["vocab_size"], work)
            initial_checkpoint(work, seed)
        chat = ChatFormat(work)
        from runtime.checkpoint.config import load_config

        cfg = load_config(work)
        table = elastic_table(cfg)
        (work / "elastic.json").write_text(json.dumps(table, indent=2) + "\n")
        names = [s["name"] for s in table["submodels"]]
        tm = TrainableModel.from_checkpoint(work)
        if state is not None:
            with torch.no_grad():
                for p, saved in zip(tm.parameters(), state["tensors"]):
                    p.copy_(saved)

        phase = state["phase"] if state else (init_phase if init is not None else "parent")
        if phase == "parent":
            train(tm, chat, seed, parent_steps, batch_size, lr, names, log, "parent", mix, progress, state,
                  checkpoint_every)
            calib = [make_batch(chat, seed, "calibration", i, batch_size, mix) for i in range(4)]
            permute_by_importance(tm, measure(tm, calib))
            log("permuted the parent's components by importance")
            progress.save("elastic", 0, tm, None)
            phase, state = "elastic", None
        # The joint phases, in order (each mix function says what its phase adds): a run resumes at the
        # phase its progress names, and each phase saves the next one's start.
        joint = [("elastic", elastic_steps, lr / 2, lambda m: m), ("polish", polish_steps, lr / 2, polish_mix),
                 ("settle", settle_steps, lr / 4, settle_mix), ("tools", tools_steps, lr / 4, tools_mix),
                 ("chat", chat_steps, lr / 4, chat_mix), ("drill", drill_steps, lr / 4, drill_mix),
                 ("balance", balance_steps, lr / 4, balance_mix), ("answer", answer_steps, lr / 4, answer_mix)]
        first = [name for name, *_ in joint].index(phase)
        for i, (name, steps, phase_lr, mix_of) in enumerate(joint[first:], first):
            train(tm, chat, seed, steps, batch_size, phase_lr, names, log, name, mix_of(mix), progress, state,
                  checkpoint_every)
            if i + 1 < len(joint):
                progress.save(joint[i + 1][0], 0, tm, None)
            state = None

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
    except BaseException:
        if not state_dir:
            shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    log(f"wrote {out} in {time.time() - started:.0f} s")
    return out


def export_progress(state_dir: Path, out: Path) -> Path:
    """Writes the weights of a run in progress as a checkpoint (to measure a run before it ends)."""
    state_dir, out = Path(state_dir), Path(out)
    if not (state_dir / "progress.pt").exists():
        raise SystemExit(f"error: no progress.pt in {state_dir}; point --export-progress at a run's state folder")
    state = torch.load(state_dir / "progress.pt", weights_only=False)
    tm = TrainableModel.from_checkpoint(state_dir)
    with torch.no_grad():
        for p, saved in zip(tm.parameters(), state["tensors"]):
            p.copy_(saved)
    out.mkdir(parents=True, exist_ok=True)
    for name in COMPANIONS:
        shutil.copy2(state_dir / name, out / name)
    save_file(hub_tensors(tm.cfg, tm.weights, tm.a_logs), str(out / "model.safetensors"), metadata={"format": "pt"})
    print(f"wrote {out}: {state['phase']} step {state['step']}")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.train_demo")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parent-steps", type=int, default=400)
    parser.add_argument("--elastic-steps", type=int, default=160)
    parser.add_argument("--polish-steps", type=int, default=450)
    parser.add_argument("--settle-steps", type=int, default=800)
    parser.add_argument("--tools-steps", type=int, default=250)
    parser.add_argument("--chat-steps", type=int, default=150)
    parser.add_argument("--drill-steps", type=int, default=300)
    parser.add_argument("--balance-steps", type=int, default=150)
    parser.add_argument("--answer-steps", type=int, default=250)
    parser.add_argument("--init", type=Path, default=None, metavar="CHECKPOINT",
                        help="start from a finished demo checkpoint's weights and tokenizer (e.g. assets/demo) "
                             "at --init-phase, instead of training the earlier phases again from the seed")
    parser.add_argument("--init-phase", choices=PHASES[1:], default="drill")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--trace", choices=sorted(TRACES), default="columns",
                        help="the thinking trace: column by column (default) or whole operations (the old one)")
    parser.add_argument("--state", type=Path, default=None,
                        help="folder for resumable progress (default: OUT's sibling .OUT-train-state); "
                             "rerunning the same command resumes from it")
    parser.add_argument("--checkpoint-every", type=float, default=180.0, help="seconds between progress saves")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; 1 is fastest on a machine shared with other work")
    parser.add_argument("--smoke", action="store_true", help="a few steps only (tests)")
    parser.add_argument("--export-progress", type=Path, default=None, metavar="STATE",
                        help="write the weights of the run in progress in STATE to OUT, and stop")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    # Long sequences drive some of the Mamba scan's values subnormal, which the CPU computes 10-20x
    # slower (a tools step took 77 s instead of 3.8): flush them to zero.
    torch.set_flush_denormal(True)
    if args.export_progress:
        export_progress(args.export_progress, args.out)
        return
    if args.smoke:
        args.parent_steps, args.elastic_steps, args.polish_steps, args.settle_steps = 3, 3, 2, 2
        args.tools_steps, args.chat_steps, args.drill_steps, args.balance_steps = 2, 2, 2, 2
        args.answer_steps = 2
        args.batch_size = 4
    state = args.state or args.out.parent / f".{args.out.name}-train-state"
    build(args.out, args.seed, args.parent_steps, args.elastic_steps, args.batch_size, args.lr,
          mix=Mix(trace=args.trace), state_dir=state, checkpoint_every=args.checkpoint_every,
          polish_steps=args.polish_steps, settle_steps=args.settle_steps, tools_steps=args.tools_steps,
          chat_steps=args.chat_steps, drill_steps=args.drill_steps, balance_steps=args.balance_steps,
          answer_steps=args.answer_steps, init=args.init,
          init_phase=args.init_phase)


if __name__ == "__main__":
    main()
