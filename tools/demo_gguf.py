"""Converts the bundled demo (or another small NemotronH checkpoint) to GGUF for llama.cpp's server, with
llama.cpp's own converter (its `convert_hf_to_gguf.py` and `gguf-py`, from a llama.cpp source tree):

    python tools/demo_gguf.py --llama-cpp PATH/TO/llama.cpp [--checkpoint assets/demo] --out demo.gguf

Two things stand in the converter's way, both worked around on a copy, never on the checkpoint:
- it loads the tokenizer with `trust_remote_code=True`, so a config's `auto_map` (a checkpoint's own
  Python class) is dropped from the copy: that code must never run;
- it names the pre-tokenizer by a hash of how the tokenizer splits a test text, and does not know the
  demo's: a byte-level BPE whose digits are split one by one (Digits(individual_digits) then ByteLevel)
  is llama.cpp's "starcoder" pre-tokenizer (\\p{N}, then GPT-2's regex), so that name is given for
  exactly that tokenizer and any other unknown one is still refused.

The converter maps NemotronH with experts to `nemotron_h_moe`. docs/remote.md gives the commands that
build llama-server and serve the file; tests/runtime/remote/test_against_llama_server.py runs them.
"""

from __future__ import annotations

import argparse
import json
import runpy
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIGITS_THEN_BYTES = "starcoder"  # llama.cpp's pre-tokenizer: \p{N} alone, then GPT-2's regex


def splits_digits_then_bytes(folder: Path) -> bool:
    """Whether the tokenizer's pre-tokenizer is Digits(individual_digits) followed by ByteLevel."""
    pre = json.loads((folder / "tokenizer.json").read_text()).get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else []
    return [s.get("type") for s in steps] == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") is True \
        and steps[1].get("use_regex", True) is True and steps[1].get("add_prefix_space") is False


def copy_without_code(checkpoint: Path, into: Path) -> Path:
    """The checkpoint's files in `into`, its configs without `auto_map`."""
    out = into / checkpoint.name
    shutil.copytree(checkpoint, out)
    for name in ("config.json", "tokenizer_config.json"):
        path = out / name
        if path.exists():
            data = json.loads(path.read_text())
            data.pop("auto_map", None)
            path.write_text(json.dumps(data, indent=2))
    return out


def convert(llama_cpp: Path, checkpoint: Path, out: Path, outtype: str = "f32") -> Path:
    """Runs llama.cpp's converter on a copy of `checkpoint`; returns the GGUF file."""
    script = llama_cpp / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise SystemExit(f"{llama_cpp} has no convert_hf_to_gguf.py; give --llama-cpp the llama.cpp source tree")
    sys.path[:0] = [str(llama_cpp), str(llama_cpp / "gguf-py")]
    from conversion import base  # llama.cpp's converter package

    known = base.TextModel.get_vocab_base_pre

    def vocab_base_pre(self, tokenizer) -> str:
        try:
            return known(self, tokenizer)
        except NotImplementedError:
            if splits_digits_then_bytes(Path(self.dir_model)):
                return DIGITS_THEN_BYTES
            raise

    base.TextModel.get_vocab_base_pre = vocab_base_pre
    with tempfile.TemporaryDirectory() as tmp:
        copy = copy_without_code(checkpoint, Path(tmp))
        sys.argv = [str(script), str(copy), "--outfile", str(out), "--outtype", outtype]
        runpy.run_path(str(script), run_name="__main__")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp's source tree")
    parser.add_argument("--checkpoint", type=Path, default=ROOT / "assets" / "demo")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--outtype", default="f32", choices=["f32", "f16", "bf16", "q8_0"])
    args = parser.parse_args()
    convert(args.llama_cpp.resolve(), args.checkpoint.resolve(), args.out.resolve(), args.outtype)


if __name__ == "__main__":
    main()
