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

from ..errors import CheckpointError, show
from .config import read_json

BYTES_PER_ELEMENT = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit
MAX_DIMS = 8
MAX_SHARDS = 10_000


@dataclass(frozen=True)
class TensorInfo:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int = 0  # byte offset of the tensor's data in its file

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * BYTES_PER_ELEMENT.get(self.dtype, 1)


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise _Corrupt(f"names {dup!r} twice")
    return dict(pairs)


class _Corrupt(Exception):
    pass


def _no_constant(name):
    raise _Corrupt(f"holds {name}, which JSON does not allow")


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor table of one safetensors file, after checking it is complete and consistent.

    Checked here, before any tensor is read: the header length, the header as JSON of exactly the
    format's types (dtype strings, shapes and offsets as lists of whole numbers, metadata as
    string pairs; anything deeper or of another type is refused), every tensor's offsets against
    its shape, and that the tensors tile the data area exactly (no overlap, no gap, no trailing
    bytes, no truncation), as safetensors itself requires."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a pipe would block, a device never end
            raise CheckpointError(path, "is not a regular file")
        size = path.stat().st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(path, "the file is truncated (shorter than a safetensors header): "
                                            "download it again")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > MAX_HEADER or 8 + header_len > size:
                raise CheckpointError(
                    path, "the file is truncated or is not a safetensors file (bad header length): download it again")
            raw = f.read(header_len)
    except FileNotFoundError:
        raise CheckpointError(path, "file not found") from None
    except IsADirectoryError:
        raise CheckpointError(path, "is a folder, not a safetensors file") from None
    except OSError as e:
        raise CheckpointError(path, f"cannot read the file ({e.strerror})") from None

    return parse_header(raw, size - 8 - header_len, path)


def parse_header(raw: bytes, data_size: int, path) -> dict[str, TensorInfo]:
    """Checks one safetensors header (the JSON bytes after the length prefix) against a data area
    of `data_size` bytes; `path` names the file in errors and in the returned infos."""
    path = Path(path)
    data_start = 8 + len(raw)

    def corrupt(problem):
        return CheckpointError(path, f"the safetensors header is corrupt ({problem}): download the file again")

    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys,
                            parse_constant=_no_constant)
    except _Corrupt as e:
        raise corrupt(str(e)) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise corrupt("not valid JSON") from None
    except RecursionError:
        raise corrupt("nested too deeply") from None
    if not isinstance(header, dict):
        raise corrupt("not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise corrupt("__metadata__ must map names to strings")

    tensors, spans = {}, []
    for name, entry in header.items():
        shown = name if len(name) <= 80 else name[:77] + "..."
        if not isinstance(entry, dict):
            raise corrupt(f"the entry for {shown!r} is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str):
            raise corrupt(f"the dtype of {shown!r} is not a string")
        if dtype not in BYTES_PER_ELEMENT:
            shown_dtype = dtype if len(dtype) <= 20 else dtype[:17] + "..."
            raise CheckpointError(path, f"tensor {shown!r} has an unsupported dtype {shown_dtype!r}")
        if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(_is_count(n) for n in shape):
            raise corrupt(f"the shape of {shown!r} is not a list of whole numbers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(n) for n in offsets):
            raise corrupt(f"the data_offsets of {shown!r} are not two whole numbers")
        start, stop = offsets
        info = TensorInfo(path, dtype, tuple(shape), data_start + start)
        if start > stop or stop - start != info.nbytes:
            raise corrupt(f"offsets of {shown!r} do not match its shape")
        spans.append((start, stop, shown))
        tensors[name] = info
    end = 0
    for start, stop, shown in sorted(spans):
        if start != end:
            problem = "overlaps the tensor before it" if start < end else "leaves a gap before it"
            raise corrupt(f"the data of {shown!r} {problem}")
        end = stop
    if end > data_size:
        missing = end - data_size
        raise CheckpointError(
            path, f"the file is truncated: {missing:,} bytes of tensor data are missing; download it again")
    if end < data_size:
        raise corrupt(f"{data_size - end:,} bytes follow the last tensor")
    return tensors


WINDOWS_DEVICES = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}


def valid_shard_name(name) -> bool:
    """A shard named by an index must be a plain file name inside the checkpoint folder, on every
    OS: no separators, drive letters, device names (NUL.safetensors on Windows), control characters."""
    return (isinstance(name, str) and name.endswith(".safetensors") and not name.startswith(".")
            and len(name) <= 255 and name.isprintable() and name == name.strip()
            and not any(c in name for c in '/\\:*?"<>|')
            and name.split(".")[0].upper() not in WINDOWS_DEVICES)


def parse_index(data: dict, index) -> dict[str, str]:
    """The weight map of a sharded checkpoint's index, checked: tensor name -> shard file name."""
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(index, "has no 'weight_map' naming the shard of each tensor")
    if not isinstance(data.get("metadata", {}), dict):
        raise CheckpointError(index, "'metadata' must be an object")
    for shard in weight_map.values():
        if not valid_shard_name(shard):
            raise CheckpointError(index, f"names an invalid shard file {show(shard, 60)}; shards must be .safetensors "
                                         "files in the checkpoint folder itself")
    shards = set(weight_map.values())
    if len(shards) > MAX_SHARDS:
        raise CheckpointError(index, f"names {len(shards):,} shard files; at most {MAX_SHARDS:,} are supported")
    return weight_map


def tensor_table(folder: Path) -> dict[str, TensorInfo]:
    """All tensors of a checkpoint folder: `model.safetensors` or a sharded index."""
    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.exists():
        weight_map = parse_index(read_json(index), index)
        shards = set(weight_map.values())
        table = {}
        for shard in sorted(shards):
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
