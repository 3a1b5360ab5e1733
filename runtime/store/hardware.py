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

GiB = 1024 ** 3


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    total_bytes: int
    free_bytes: int
    used_by_others_bytes: int  # memory held by other processes when probed
    driver: str

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
                   d.get("no_gpu_reason", ""), d.get("extra", {}))

    def summary(self) -> str:
        g = self.gpu
        ram = f"{self.ram_total_bytes / GiB:.0f} GB RAM, {self.disk_free_bytes / GiB:.0f} GB free disk"
        if g is None:
            return f"No NVIDIA GPU ({self.no_gpu_reason}); {ram}"
        others = (f", {g.used_by_others_bytes / GiB:.1f} GB held by other programs"
                  if g.used_by_others_bytes > GiB // 4 else "")
        return (f"{g.name} ({g.architecture}, compute {g.compute_capability[0]}.{g.compute_capability[1]}): "
                f"{g.free_bytes / GiB:.1f} of {g.total_bytes / GiB:.1f} GB free{others}; driver {g.driver}; {ram}")


def probe(models_dir: Path | str | None = None) -> HardwareProbe:
    import psutil

    vm = psutil.virtual_memory()
    disk_path = Path(models_dir) if models_dir else Path.home()
    while not disk_path.exists() and disk_path != disk_path.parent:
        disk_path = disk_path.parent
    disk_free = shutil.disk_usage(disk_path).free
    gpus, reason = _probe_gpus()
    return HardwareProbe(tuple(gpus), vm.total, vm.available, disk_free, reason)


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
                                int(mem.total), int(mem.free), _held_by_others(pynvml, h, int(mem.used)), driver))
        return gpus, "" if gpus else "the NVIDIA driver reports no GPUs"
    except pynvml.NVMLError as e:
        return [], f"the NVIDIA driver did not answer ({_nvml_text(e)})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


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
    return HardwareProbe.from_dict(json.loads(Path(path).read_text()))
