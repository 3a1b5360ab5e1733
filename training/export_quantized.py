"""Exports a full-precision elastic checkpoint to NVFP4 or FP8 with NVIDIA ModelOpt.

    python -m training.export_quantized --checkpoint assets/demo --format NVFP4 --out assets/demo-nvfp4
    python -m training.export_quantized --checkpoint assets/demo --format FP8 --out /tmp/demo-fp8

Exclusions follow NVIDIA's NemotronH exports: lm_head, the attention projections and the Mamba
projections next to attention layers stay BF16 (ModelOpt already keeps embeddings, convs and
routers out). Calibration uses the demo's own training data when the checkpoint is the demo,
else a few generic chat prompts. The exported files are left exactly as ModelOpt writes them
(including its garbled exclude names, which the runtime repairs when reading).
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
from pathlib import Path

import torch

from runtime.checkpoint.config import load_config
from runtime.store.catalog import bf16_modules

COMPANIONS = ("elastic.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
CALIBRATION_PROMPTS = ["Hello! What is 12 + 7 - 5?", "What is Elastic Chat?", "How do I get the real model?",
                       "What is 45 + 23 - 17 + 9?", "Thanks!", "Write a short poem about GPUs.", "Add 45 and 23",
                       "38+47"]


def quant_config(fmt: str, cfg) -> dict:
    import modelopt.torch.quantization as mtq

    base = copy.deepcopy(mtq.NVFP4_DEFAULT_CFG if fmt == "NVFP4" else mtq.FP8_DEFAULT_CFG)
    base["quant_cfg"] = list(base["quant_cfg"]) + [{"quantizer_name": p, "enable": False} for p in bf16_modules(cfg)]
    return base


def calibration_batches(folder: Path) -> list[torch.Tensor]:
    """Whole conversations, thinking and answer included, so activations are calibrated on what the
    model actually runs: the demo's own training data for the demo's tokenizer, else chat prompts."""
    from runtime.chat_format import ChatFormat

    chat = ChatFormat(folder)
    batches = []
    for prompt in CALIBRATION_PROMPTS:
        ids = chat.prompt_ids([{"role": "user", "content": prompt}], enable_thinking=True)
        batches.append(torch.tensor([ids]))
    from .train_demo import CONFIG, chat_mix, encode

    if load_config(folder).vocab_size == CONFIG["vocab_size"]:  # the demo's tokenizer
        from .data import Mix, example_batch

        for example in example_batch(0, "quantization-calibration", 0, 24):
            batches.append(torch.tensor([encode(chat, example)[0]]))
        # and the last phase's: tools offered, calls and their results, chats of up to twelve turns
        for example in example_batch(0, "quantization-calibration-chat", 0, 16, chat_mix(Mix())):
            batches.append(torch.tensor([encode(chat, example)[0]]))
    return batches


def export(checkpoint: Path, fmt: str, out: Path) -> Path:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import NemotronHForCausalLM

    fmt = fmt.upper()
    if fmt not in ("NVFP4", "FP8"):
        raise SystemExit(f"unknown format {fmt!r}: use NVFP4 or FP8")
    cfg = load_config(checkpoint)
    model = NemotronHForCausalLM.from_pretrained(str(checkpoint), dtype=torch.bfloat16).eval()
    model.config.architectures = ["NemotronHForCausalLM"]  # export needs it; configs built in code lack it
    batches = calibration_batches(checkpoint)

    def forward_loop(m):
        with torch.no_grad():
            for ids in batches:
                m(ids)

    model = mtq.quantize(model, quant_config(fmt, cfg), forward_loop)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    # export rewrites the live model's weights in place: export a copy
    export_hf_checkpoint(copy.deepcopy(model), dtype=torch.bfloat16, export_dir=tmp)
    for name in COMPANIONS:
        if (checkpoint / name).exists():
            shutil.copy2(checkpoint / name, tmp / name)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.export_quantized")
    parser.add_argument("--checkpoint", type=Path, default=Path("assets/demo"))
    parser.add_argument("--format", default="NVFP4", help="NVFP4 or FP8")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    print(f"wrote {export(args.checkpoint, args.format, args.out)}")


if __name__ == "__main__":
    main()
