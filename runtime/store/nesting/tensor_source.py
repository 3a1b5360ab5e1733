"""Reading a checkpoint's metadata and a few of its tensors' bytes, from a folder or from the hub.

Verifying that a sliced checkpoint nests in its parent needs the slice's `config.json`, its
safetensors headers and a few rows of a few tensors, never whole files. A `TensorSource`
gives exactly that: JSON files by name, the tensor table with byte offsets, and `rows()` that
reads a range of rows of one tensor. `FolderSource` reads a local folder; `HubSource` reads a
hub repo through HTTP Range requests made by the one hub opener (`download.hub_http`: the
downloads' endpoint, redirect rules and error messages, the token never sent to another origin),
each bounded in size and in time as a whole (`RANGE_DEADLINE_S`), counting every byte it receives
so the caller can report how little was read. A caller in another thread may stop a source
(`stop`, a threading.Event: a read in flight and the next one raise `ReadCancelled`) and watch it
(`on_read`, called with the bytes of each read, from the reading thread).
"""

from __future__ import annotations

import http.client
import math
import struct
import threading
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch

from ...checkpoint.config import MAX_JSON_FILE, parse_json, read_json
from ...checkpoint.safetensors_io import BYTES_PER_ELEMENT, MAX_HEADER, TensorInfo, parse_header, parse_index
from ...errors import CheckpointError, ElasticError
from ..download.hub_files import (
    DownloadError,
    MetadataStopped,
    file_url,
    http_message,
    hub_endpoint,
    hub_token,
    resolve,
)
from ..download.hub_http import HubCall, read_bounded
from ..download.record import reason

TORCH_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
EMBED_NAMES = ("backbone.embeddings.weight", "backbone.embedding.weight")
RANGE_DEADLINE_S = 120.0  # one range read, from the request to its last byte


class ReadCancelled(ElasticError):
    """The caller stopped the source (its `stop` event is set)."""


def row_bytes(t: TensorInfo) -> int:
    """Bytes of one row (one index along the first axis) of a stored tensor."""
    return math.prod(t.shape[1:]) * BYTES_PER_ELEMENT[t.dtype]


class TensorSource:
    """A checkpoint's files, read lazily. Subclasses implement `_read(file, start, length)`."""

    label: str

    # Ranges closer than this are fetched as one: fewer requests for a few more bytes.
    GAP = 64 * 1024
    PARALLEL = 1  # concurrent range reads in `prefetch`

    def __init__(self):
        self.bytes_read = 0
        self._tensors: dict[str, TensorInfo] | None = None
        self._cache: dict[str, list[tuple[int, bytes]]] = {}
        self._json: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.stop: threading.Event | None = None  # set by another thread: the next read raises ReadCancelled
        self.on_read = None  # called with the length of each read, in the reading thread

    def _count(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n
        if self.on_read is not None:
            self.on_read(n)

    # -- files
    def has(self, file: str) -> bool:
        raise NotImplementedError

    def json(self, file: str) -> dict:
        """A JSON object file of the checkpoint, read once."""
        if file not in self._json:
            self._json[file] = self._load_json(file)
        return self._json[file]

    def _load_json(self, file: str) -> dict:
        raise NotImplementedError

    def _read(self, file: str, start: int, length: int) -> bytes:
        raise NotImplementedError

    def _size(self, file: str) -> int | None:
        return None

    def read(self, file: str, start: int, length: int) -> bytes:
        for begin, block in self._cache.get(file, ()):
            if begin <= start and start + length <= begin + len(block):
                return block[start - begin:start - begin + length]
        if self.stop is not None and self.stop.is_set():
            raise ReadCancelled("the nesting check was cancelled")
        data = self._read(file, start, length)
        self._count(len(data))
        if len(data) != length:
            raise CheckpointError(f"{self.label}/{file}", "the file ended early (truncated)")
        return data

    def prefetch(self, ranges) -> None:
        """Fetches (file, start, length) ranges, merging neighbours, into a cache `read` serves from."""
        by_file: dict[str, list[list[int]]] = {}
        jobs: list[tuple[str, int, int]] = []
        for file, start, length in ranges:
            by_file.setdefault(file, []).append([start, start + length])
        for file, spans in by_file.items():
            merged: list[list[int]] = []
            for begin, end in sorted(spans):
                if merged and begin <= merged[-1][1] + self.GAP:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([begin, end])
            jobs += [(file, begin, end) for begin, end in merged]
        # A hub answers each range after a round trip: ask for several at once.
        with ThreadPoolExecutor(max_workers=self.PARALLEL) as pool:
            blocks = list(pool.map(lambda job: self.read(job[0], job[1], job[2] - job[1]), jobs))
        for (file, begin, _), block in zip(jobs, blocks):
            self._cache.setdefault(file, []).append((begin, block))

    # -- tensors
    def tensors(self) -> dict[str, TensorInfo]:
        """Every tensor of the checkpoint (single file or sharded), under canonical names; each
        TensorInfo's `file` is the shard's name within the checkpoint."""
        if self._tensors is None:
            if self.has("model.safetensors.index.json"):
                where = f"{self.label}/model.safetensors.index.json"
                weight_map = parse_index(self.json("model.safetensors.index.json"), where)
                shards = sorted(set(weight_map.values()))
            elif self.has("model.safetensors"):
                weight_map, shards = None, ["model.safetensors"]
            else:
                raise CheckpointError(self.label, "holds no model.safetensors or model.safetensors.index.json")
            table = {}
            for shard in shards:
                for name, t in self._header(shard).items():
                    if weight_map is None or weight_map.get(name) == shard:
                        table[name] = t
            if weight_map is not None and set(weight_map) - set(table):
                missing = sorted(set(weight_map) - set(table))
                raise CheckpointError(f"{self.label}/model.safetensors.index.json",
                                      f"lists {len(missing)} tensors its shards do not hold, e.g. {missing[0]!r}")
            if EMBED_NAMES[1] in table and EMBED_NAMES[0] not in table:
                table[EMBED_NAMES[0]] = table.pop(EMBED_NAMES[1])
            self._tensors = table
        return self._tensors

    def _header(self, file: str) -> dict[str, TensorInfo]:
        where = f"{self.label}/{file}"
        (length,) = struct.unpack("<Q", self.read(file, 0, 8))
        size = self._size(file)
        if size is None or length > MAX_HEADER or 8 + length > size:
            raise CheckpointError(where, "bad safetensors header length (truncated, or not a safetensors file)")
        infos = parse_header(self.read(file, 8, length), size - 8 - length, where)
        return {name: replace(t, file=Path(file)) for name, t in infos.items()}

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows start..stop-1 (along the first axis) of tensor `name`, read as one byte range."""
        t = self.tensors()[name]
        size = row_bytes(t)
        if not t.shape:
            data = self.read(str(t.file), t.start, BYTES_PER_ELEMENT[t.dtype])
            return _decode(data, t.dtype, ())
        stop = min(stop, t.shape[0])
        data = self.read(str(t.file), t.start + start * size, (stop - start) * size)
        return _decode(data, t.dtype, (stop - start, *t.shape[1:]))

    def whole(self, name: str) -> torch.Tensor:
        t = self.tensors()[name]
        return self.rows(name, 0, t.shape[0] if t.shape else 1)


def _decode(data: bytes, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not data:
        return torch.empty(shape, dtype=TORCH_DTYPES[dtype])
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return flat.view(TORCH_DTYPES[dtype]).reshape(shape)


class FolderSource(TensorSource):
    def __init__(self, folder):
        super().__init__()
        self.folder = Path(folder)
        self.label = str(self.folder)
        if not self.folder.is_dir():
            raise CheckpointError(self.folder, "is not a folder")

    def has(self, file: str) -> bool:
        return (self.folder / file).is_file()

    def _load_json(self, file: str) -> dict:
        path = self.folder / file
        data = read_json(path)
        self._count(path.stat().st_size)
        return data

    def _size(self, file: str) -> int | None:
        return (self.folder / file).stat().st_size

    def _read(self, file: str, start: int, length: int) -> bytes:
        try:
            with open(self.folder / file, "rb") as f:
                f.seek(start)
                return f.read(length)
        except OSError as e:
            raise CheckpointError(self.folder / file, f"cannot read the file ({e.strerror})") from None


class HubSource(TensorSource):
    """A hub repository read by Range requests; `revision` is pinned to the commit it resolves to."""

    PARALLEL = 8

    def __init__(self, repo: str, revision: str | None = None, stop: threading.Event | None = None):
        super().__init__()
        self.stop = stop
        try:
            remote = resolve(repo, revision, stop=stop.is_set if stop is not None else None)
        except MetadataStopped:
            raise ReadCancelled("the nesting check was cancelled") from None
        self.repo, self.revision = remote.repo, remote.revision
        self.files = {f.path: f for f in remote.files}
        self.label = f"{repo}@{self.revision[:12]}"
        self._token = hub_token()

    def has(self, file: str) -> bool:
        return file in self.files

    def _size(self, file: str) -> int | None:
        return self.files[file].size if file in self.files else None

    def _load_json(self, file: str) -> dict:
        size = self._size(file)
        if size is None:
            raise CheckpointError(f"{self.label}/{file}", "file not found in the repo")
        if size > MAX_JSON_FILE:
            raise CheckpointError(f"{self.label}/{file}", f"is {size:,} bytes; too large for a checkpoint's JSON file")
        return parse_json(self.read(file, 0, size), f"{self.label}/{file}")

    def _read(self, file: str, start: int, length: int) -> bytes:
        if length == 0:
            return b""
        headers = {"User-Agent": "elastic-chat/0.2", "Range": f"bytes={start}-{start + length - 1}",
                   "Accept-Encoding": "identity"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        stop = self.stop.is_set if self.stop is not None else None
        with HubCall(RANGE_DEADLINE_S, stop) as call:
            try:
                with call.open(file_url(self.repo, self.revision, file), headers, 30) as response:
                    if response.status == 200 and not (start == 0 and length == self._size(file)):
                        raise CheckpointError(f"{self.label}/{file}", "the server ignored the byte range (no HTTP "
                                                                     "Range support); refusing to read the whole file")
                    data = read_bounded(response, length, decode=False, cut=True)
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError, DownloadError) as e:
                raise self._read_error(call, e, file, length) from None
            if call.interrupted:  # the socket was shut under the read: what arrived is cut short
                raise self._read_error(call, OSError(), file, length)
        return data

    def _read_error(self, call: HubCall, e: Exception, file: str, length: int) -> ElasticError:
        """What a failed range read means, in one line: a stop, the deadline, the hub's answer, the network."""
        if call.interrupted == "stopped":
            return ReadCancelled("the nesting check was cancelled")
        if call.interrupted:
            return DownloadError(f"{self.label}/{file}: the hub did not send {length:,} bytes within "
                                 f"{RANGE_DEADLINE_S:.0f} s; try again later")
        if isinstance(e, urllib.error.HTTPError):
            return DownloadError(http_message(e.code, self.repo, e.headers))
        if isinstance(e, ElasticError):
            return e
        return DownloadError(f"cannot reach {hub_endpoint()} ({reason(e)}): check the network")


def open_source(where: str, revision: str | None = None, stop: threading.Event | None = None) -> TensorSource:
    """A folder when `where` is one, else a hub repo id ("owner/name"); `stop` also stops the hub's
    metadata call."""
    path = Path(where).expanduser()
    if path.exists():
        return FolderSource(path)
    if where.count("/") == 1 and all(part and not part.startswith(".") for part in where.split("/")):
        return HubSource(where, revision, stop)
    raise CheckpointError(where, "is neither a folder nor a hub repo id (owner/name)")
