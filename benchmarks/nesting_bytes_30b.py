"""How many bytes `models nesting` reads to verify a slice of the real 30B-A3B, without the files.

Builds the tensor tables the parent and a sliced checkpoint would have (the catalog's 30B
config, the 12B widths from the catalog or --widths, BF16 tensors laid out in the order the
safetensors writer uses: by name), backs them with zero bytes, and runs the real `discover`
on them. Zeros on both sides always match, so this measures the verification's plan: bytes
and requests, header reads included, for sharded files like the hub's.

    python -m benchmarks.nesting_bytes_30b [--shards 13]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runtime.checkpoint.config import ModelConfig
from runtime.checkpoint.safetensors_io import BYTES_PER_ELEMENT, TensorInfo
from runtime.checkpoint.submodels import FORMAT, parse_elastic
from runtime.checkpoint.weights import expected_tensors
from runtime.store.nesting.discover import discover
from runtime.store.nesting.tensor_source import TensorSource

ROOT = Path(__file__).resolve().parents[1]


class SyntheticSource(TensorSource):
    """A checkpoint whose tensors are all zeros, sharded like a hub upload, read by range."""

    def __init__(self, label: str, config: dict, shapes: dict[str, tuple], shards: int):
        super().__init__()
        self.label, self.config, self.requests = label, config, 0
        names = sorted(shapes)
        per = -(-len(names) // shards)
        table, self.sizes = {}, {}
        for s in range(shards):
            file, offset = f"model-{s + 1:05d}-of-{shards:05d}.safetensors", 8 + 100_000  # header estimate
            for name in names[s * per:(s + 1) * per]:
                table[name] = TensorInfo(Path(file), "BF16", shapes[name], offset)
                offset += BYTES_PER_ELEMENT["BF16"] * _prod(shapes[name])
            self.sizes[file] = offset
        self._tensors = table
        self.bytes_read += 8 * shards + 100_000 * shards  # reading the headers themselves

    def has(self, file: str) -> bool:
        return file == "config.json"

    def _load_json(self, file: str) -> dict:
        return self.config

    def _read(self, file: str, start: int, length: int) -> bytes:
        self.requests += 1
        return bytes(length)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=13)
    ap.add_argument("--widths", help="JSON widths of the slice (default: the catalog's 12B estimate)")
    args = ap.parse_args(argv)
    family = json.loads((ROOT / "assets" / "catalog.json").read_text())["families"]["star-elastic-30b"]
    raw = {**family["config"], "layers_block_type": None}
    raw.pop("layers_block_type")
    cfg = ModelConfig.from_dict(raw)
    widths = json.loads(args.widths) if args.widths else next(
        {k: v for k, v in s.items() if k != "name"} for s in family["elastic"]["submodels"] if s["name"] == "12B")
    sub = parse_elastic({"format": FORMAT, "submodels": [{"name": "30B"}, {"name": "12B", **widths}]}, cfg)[1]
    slice_raw = {**raw, **widths}
    parent = SyntheticSource("parent", raw, expected_tensors(cfg), args.shards)
    piece = SyntheticSource("slice", slice_raw, expected_tensors(cfg, sub), max(1, args.shards // 2))
    report = discover(parent, piece)
    total = sum(parent.sizes.values()) + sum(piece.sizes.values())
    print(f"verified={report.verified} tensors compared={report.checked_tensors}")
    print(f"bytes read: {report.bytes_read / 1e6:.1f} MB of {total / 1e9:.1f} GB "
          f"({parent.requests + piece.requests} range requests after merging neighbours)")


if __name__ == "__main__":
    main()
