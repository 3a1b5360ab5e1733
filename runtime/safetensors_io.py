"""Reading safetensors files safely: headers are checked by hand before any tensor is read.

The safetensors format is an 8-byte little-endian header length, a JSON header mapping
tensor names to dtype, shape and byte offsets, then the raw data. Checking the header
ourselves lets a truncated download or a corrupt file become one clear sentence instead
of a Rust panic or a torch traceback. Nothing here unpickles anything.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from .config import read_json
from .errors import CheckpointError

BYTES_PER_ELEMENT = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}
MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * BYTES_PER_ELEMENT.get(self.dtype, 1)


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor table of one safetensors file, after checking it is complete and consistent."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(path, "the file is truncated (shorter than a safetensors header): download it again")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > MAX_HEADER or 8 + header_len > size:
                raise CheckpointError(
                    path, "the file is truncated or is not a safetensors file (bad header length): download it again")
            raw = f.read(header_len)
    except FileNotFoundError:
        raise CheckpointError(path, "file not found") from None
    except OSError as e:
        raise CheckpointError(path, f"cannot read the file ({e.strerror})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(path, "the safetensors header is corrupt (not valid JSON): download the file again") from None
    if not isinstance(header, dict):
        raise CheckpointError(path, "the safetensors header is corrupt: download the file again")
    header.pop("__metadata__", None)

    data_size = size - 8 - header_len
    tensors, end = {}, 0
    for name, entry in header.items():
        try:
            dtype, shape, (start, stop) = entry["dtype"], tuple(int(s) for s in entry["shape"]), entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise CheckpointError(path, f"the safetensors header entry for {name!r} is corrupt: download the file again") from None
        if dtype not in BYTES_PER_ELEMENT:
            raise CheckpointError(path, f"tensor {name!r} has an unsupported dtype {dtype!r}")
        info = TensorInfo(path, dtype, shape)
        if not 0 <= start <= stop or stop - start != info.nbytes:
            raise CheckpointError(path, f"the safetensors header is corrupt (offsets of {name!r} do not match its shape)")
        end = max(end, stop)
        tensors[name] = info
    if end > data_size:
        missing = end - data_size
        raise CheckpointError(
            path, f"the file is truncated: {missing:,} bytes of tensor data are missing; download it again")
    return tensors


def tensor_table(folder: Path) -> dict[str, TensorInfo]:
    """All tensors of a checkpoint folder: `model.safetensors` or a sharded index."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.exists():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(index, "has no 'weight_map' naming the shard of each tensor")
        table = {}
        for shard in sorted(set(weight_map.values())):
            if not isinstance(shard, str) or "/" in shard or "\\" in shard or shard.startswith("."):
                raise CheckpointError(index, f"names an invalid shard file {shard!r}")
            shard_tensors = read_header(folder / shard)
            for name, info in shard_tensors.items():
                if weight_map.get(name) == shard:
                    table[name] = info
        listed_missing = sorted(set(weight_map) - set(table))
        if listed_missing:
            raise CheckpointError(
                index, f"lists {len(listed_missing)} tensors its shards do not hold, e.g. {listed_missing[0]!r}")
        return table
    if single.exists():
        return read_header(single)
    if any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
        raise CheckpointError(folder, "holds only pickle-based weights (.bin/.pt); Elastic Chat reads safetensors only")
    raise CheckpointError(folder, "no model.safetensors or model.safetensors.index.json in this folder")
