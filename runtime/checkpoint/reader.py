"""Reading tensors from safetensors shards through memory maps, with progress and cancel.

A shard is mapped copy-on-write and never written, so a tensor read in its stored form is a view
of the file's pages: no private copy. On the CPU, weights kept in their stored dtype stay such
views; those pages are clean and file-backed, so under memory pressure the kernel can drop them and
read them again, instead of killing another program. Pages the loader only read to copy (Mamba rows
reordered, a dtype converted, a tensor sent to a GPU) are released as soon as nothing resident
lies on them, so a GPU load holds about one tensor of the file in host memory at a time.

Headers were checked before (safetensors_io.py): offsets tile each file exactly, so every view
lies inside its mapping.
"""

from __future__ import annotations

import mmap
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ElasticError
from ..units import format_part
from .safetensors_io import TensorInfo

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
PAGE = mmap.PAGESIZE
MADV_POPULATE_READ = 22  # Linux 5.14+: fault the range in now (reads it from disk), without copying it


@dataclass(frozen=True)
class LoadProgress:
    """Where a load stands, for a progress bar: bytes of tensor data read of the total, the shard."""

    bytes_read: int
    bytes_total: int
    tensors_read: int
    tensors_total: int
    shard: str  # file name of the shard being read
    shard_index: int  # 1-based
    shard_count: int
    elapsed_s: float
    eta_s: float | None  # None until enough is read to say

    @property
    def fraction(self) -> float:
        return self.bytes_read / self.bytes_total if self.bytes_total else 1.0

    def line(self) -> str:
        """One line for a terminal: 'loading 3.0 of 16.8 GiB (18%), shard 1 of 5, about 41 s left', in the
        binary units the model manager shows sizes in (runtime/units.py)."""
        left = f", about {self.eta_s:.0f} s left" if self.eta_s is not None else ""
        return (f"loading {format_part(self.bytes_read, self.bytes_total)} ({100 * self.fraction:.0f}%), "
                f"shard {self.shard_index} of {self.shard_count}{left}")


class LoadCancelled(ElasticError):
    def __init__(self):
        super().__init__("loading was cancelled")


ProgressFn = Callable[[LoadProgress], None]


class LoadMeter:
    """Counts what a load has read and reports it; checks the cancel flag between tensors."""

    def __init__(self, bytes_total: int, tensors_total: int, shards: list[str], report: ProgressFn | None,
                 cancelled: Callable[[], bool] | None):
        self.total, self.tensors_total, self.shards = bytes_total, tensors_total, shards
        self.report, self.cancelled = report, cancelled
        self.read = self.tensors = 0
        self.shard = shards[0] if shards else ""
        self.start = time.perf_counter()

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise LoadCancelled()

    def add(self, nbytes: int, shard: str) -> None:
        self.read = min(self.total, self.read + nbytes) if self.total else self.read + nbytes
        self.tensors += 1
        self.shard = shard
        if self.report is not None:
            self.report(self.now())

    def now(self) -> LoadProgress:
        elapsed = time.perf_counter() - self.start
        eta = None
        if self.read and self.total and (elapsed > 1 or self.read > self.total // 100):
            eta = elapsed * (self.total - self.read) / self.read
        index = self.shards.index(self.shard) + 1 if self.shard in self.shards else 1
        return LoadProgress(self.read, self.total, self.tensors, self.tensors_total, self.shard, index,
                            max(1, len(self.shards)), elapsed, eta)


class MappedShards:
    """Every shard of a checkpoint mapped once; tensors are views of the mappings."""

    def __init__(self):
        self.maps: dict[Path, tuple[mmap.mmap, int]] = {}  # file -> (mapping, its address)

    def _map(self, path: Path) -> tuple[mmap.mmap, int]:
        if path not in self.maps:
            with open(path, "rb") as f:  # the mapping keeps its own reference to the file
                size = os.fstat(f.fileno()).st_size
                mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) if size else None
            address = _address(mm) if mm is not None else 0
            self.maps[path] = (mm, address)
        return self.maps[path]

    def tensor(self, info: TensorInfo) -> torch.Tensor:
        """The stored tensor as a view of its file's pages (a copy only if its bytes are misaligned
        for its dtype, which safetensors' own writer never does)."""
        dtype = DTYPES[info.dtype]
        if info.nbytes == 0:
            return torch.empty(info.shape, dtype=dtype)
        mm, _ = self._map(Path(info.file))
        size = torch.empty((), dtype=dtype).element_size()
        flat = torch.frombuffer(mm, dtype=torch.uint8, count=info.nbytes, offset=info.start)
        if info.start % size:
            flat = flat.clone()
        return flat.view(dtype).view(info.shape)

    def contains(self, t: torch.Tensor) -> bool:
        """Whether `t` lies in one of the mappings (a view of a file, not a copy)."""
        return self._span(t) is not None

    def covers(self, t: torch.Tensor) -> bool:
        """Whether `t` is a whole stored tensor (not a slice of one)."""
        return t.storage_offset() == 0 and t.nbytes == t.untyped_storage().nbytes() and self.contains(t)

    def populate(self, t: torch.Tensor) -> None:
        """Reads the pages under a view now (so the first token does not pay for the disk)."""
        span = self._span(t)
        if span is None:
            return
        mm, start, stop = span
        start -= start % PAGE
        if sys.platform.startswith("linux"):
            try:
                mm.madvise(MADV_POPULATE_READ, start, stop - start)
                return
            except OSError:
                pass  # an older kernel: touch one byte per page instead
        flat = t.reshape(-1).view(torch.uint8) if t.is_contiguous() else None
        if flat is not None:
            flat[::PAGE].sum()

    def release(self, t: torch.Tensor) -> None:
        """Drops the pages wholly inside a view from this process (after it was copied elsewhere)."""
        span = self._span(t)
        if span is None or not hasattr(mmap.mmap, "madvise"):
            return
        mm, start, stop = span
        start += -start % PAGE
        stop -= stop % PAGE
        if stop > start:
            mm.madvise(mmap.MADV_DONTNEED, start, stop - start)

    def release_unused(self, keep: Iterable[torch.Tensor]) -> int:
        """Drops every mapped page no tensor in `keep` lies on; returns the bytes of mappings released."""
        if not hasattr(mmap.mmap, "madvise"):
            return 0
        kept: dict[Path, list[tuple[int, int]]] = {p: [] for p in self.maps}
        for t in keep:
            storage = t.untyped_storage()
            for path, (mm, address) in self.maps.items():
                if mm is not None and address <= storage.data_ptr() < address + len(mm):
                    begin = storage.data_ptr() - address
                    kept[path].append((begin, begin + storage.nbytes()))
                    break
        released = 0
        for path, ranges in kept.items():
            mm, _ = self.maps[path]
            if mm is None:
                continue
            edge = 0
            for begin, end in sorted(ranges) + [(len(mm), len(mm))]:
                lo, hi = edge + (-edge % PAGE), begin - begin % PAGE
                if hi > lo:
                    mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                    released += hi - lo
                edge = max(edge, end)
        return released

    def _span(self, t: torch.Tensor):
        storage = t.untyped_storage()
        for mm, address in self.maps.values():
            if mm is not None and address <= storage.data_ptr() < address + len(mm):
                begin = storage.data_ptr() - address
                return mm, begin, begin + storage.nbytes()
        return None


def _address(mm: mmap.mmap) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(mm))
