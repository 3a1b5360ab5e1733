"""What this PC has: NVIDIA GPUs (through NVML), RAM and free disk.

`probe()` never raises: with no NVIDIA GPU, no driver or no NVML library it returns a probe
with no GPUs and the reason. Probes are plain data, saved and loaded as JSON, so the fit
planner's tests run on recorded probes of real cards.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UsageError, show
from ..json_file import JsonFileError, read_json_file
from ..units import GiB, format_bytes


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    total_bytes: int
    free_bytes: int
    used_by_others_bytes: int  # memory held by other processes when probed
    driver: str
    memory_bandwidth_bytes_per_s: int = 0  # bus width x memory clock (NVML); 0: not known

    @property
    def architecture(self) -> str:
        major, minor = self.compute_capability
        if major in (10, 12):
            return "Blackwell"
        if (major, minor) == (8, 9):
            return "Ada"
        if major == 9:
            return "Hopper"
        if major == 8:
            return "Ampere"
        if major == 7 and minor == 5:
            return "Turing"
        return f"compute {major}.{minor}"


@dataclass(frozen=True)
class HardwareProbe:
    gpus: tuple[GpuInfo, ...]
    ram_total_bytes: int
    ram_available_bytes: int
    disk_free_bytes: int  # where models are stored
    no_gpu_reason: str = ""  # why there is no usable GPU, when there is none
    extra: dict = field(default_factory=dict)
    ram_read_bytes_per_s: int = 0  # a streaming read measured when probing (with a GPU); 0: not measured

    @property
    def gpu(self) -> GpuInfo | None:
        """The GPU the app uses: the one with the most free memory."""
        return max(self.gpus, key=lambda g: g.free_bytes) if self.gpus else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dict(cls, d: dict) -> "HardwareProbe":
        gpus = tuple(GpuInfo(**{**g, "compute_capability": tuple(g["compute_capability"])}) for g in d.get("gpus", []))
        return cls(gpus, int(d["ram_total_bytes"]), int(d["ram_available_bytes"]), int(d["disk_free_bytes"]),
                   d.get("no_gpu_reason", ""), d.get("extra", {}), int(d.get("ram_read_bytes_per_s", 0)))

    def summary(self) -> str:
        g = self.gpu
        ram = self.ram_text()
        if g is None:
            return f"No NVIDIA GPU ({self.no_gpu_reason}); {ram}"
        others = (f", {format_bytes(g.used_by_others_bytes, 'GiB')} held by other programs"
                  if g.used_by_others_bytes > GiB // 4 else "")
        return (f"{g.name} ({g.architecture}, compute {g.compute_capability[0]}.{g.compute_capability[1]}): "
                f"{g.free_bytes / GiB:.1f} of {format_bytes(g.total_bytes, 'GiB')} free{others}; driver {g.driver}; "
                f"{ram}")

    def ram_text(self) -> str:
        """"31 GiB RAM, 120 GiB free disk"."""
        return (f"{format_bytes(self.ram_total_bytes, 'GiB', 0)} RAM, "
                f"{format_bytes(self.disk_free_bytes, 'GiB', 0)} free disk")


def probe(models_dir: Path | str | None = None) -> HardwareProbe:
    import psutil

    vm = psutil.virtual_memory()
    disk_path = Path(models_dir) if models_dir else Path.home()
    while not disk_path.exists() and disk_path != disk_path.parent:
        disk_path = disk_path.parent
    disk_free = shutil.disk_usage(disk_path).free
    gpus, reason = _probe_gpus()
    # RAM's speed matters only to place experts in it for a GPU (store/placement_plan.py)
    ram_read = ram_read_speed() if gpus else 0
    return HardwareProbe(tuple(gpus), vm.total, vm.available, disk_free, reason, ram_read_bytes_per_s=ram_read)


def ram_read_speed(nbytes: int = 256 << 20, runs: int = 3) -> int:
    """Bytes/s of a streaming read of RAM (a sum over a touched buffer, best of `runs`) with torch's
    threads, as the CPU's experts would read (a never-touched buffer would read the zero page)."""
    import time

    import torch

    buf = torch.ones(nbytes // 4)
    best = 0.0
    for _ in range(runs):
        t0 = time.perf_counter()
        buf.sum()
        best = max(best, buf.nbytes / (time.perf_counter() - t0))
    return int(best)


def _probe_gpus() -> tuple[list[GpuInfo], str]:
    try:
        import pynvml
    except ImportError:
        return [], "the NVML library (nvidia-ml-py) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return [], f"no NVIDIA driver found ({_nvml_text(e)})"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(GpuInfo(i, _text(pynvml.nvmlDeviceGetName(h)),
                                tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
                                int(mem.total), int(mem.free), _held_by_others(pynvml, h, int(mem.used)), driver,
                                _bandwidth(pynvml, h)))
        return gpus, "" if gpus else "the NVIDIA driver reports no GPUs"
    except pynvml.NVMLError as e:
        return [], f"the NVIDIA driver did not answer ({_nvml_text(e)})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _bandwidth(pynvml, handle) -> int:
    """Peak memory bandwidth: bus width (bits) x the maximum memory clock, two transfers a clock (NVML
    gives GDDR6X and HBM clocks so that this holds: 384 bits x 10501 MHz = 1008 GB/s on an RTX 4090)."""
    try:
        bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
        mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
    except (pynvml.NVMLError, AttributeError):
        return 0
    return int(bits) * int(mhz) * 1_000_000 * 2 // 8


def _held_by_others(pynvml, handle, used: int) -> int:
    """Memory of other processes on the GPU (ours excluded), or all used memory if NVML won't say."""
    total, mine = 0, os.getpid()
    try:
        procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        procs += list(pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
    except pynvml.NVMLError:
        return used
    seen = set()
    for p in procs:
        if p.pid != mine and p.pid not in seen and p.usedGpuMemory:
            seen.add(p.pid)
            total += int(p.usedGpuMemory)
    return total or used


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_text(error) -> str:
    try:
        return _text(error.__str__())
    except Exception:
        return type(error).__name__


def load_probe(path: Path | str) -> HardwareProbe:
    """A recorded probe (`models probe --json`), as the planner's stand-in for this PC's."""
    try:
        data = read_json_file(path, 1 << 20)
    except (OSError, JsonFileError) as e:
        raise UsageError(f"the hardware probe {path} cannot be used ({e})") from None
    try:
        return HardwareProbe.from_dict(data)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"the hardware probe {path} is not one `models probe --json` wrote ({show(e)})") from None
