"""Where the CPU kernels do not run, today's PyTorch path does, and the status says why: turned off,
never built, a failed build, a path this CPU cannot run, a path that fails its self-test. Also what
makes a build current (the sources, torch, the compiler). None of this needs a compiler."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from runtime import ElasticModel, device, kernels, matmul
from runtime.kernels.cpu import library, self_test
from tests.paths import DEMO_NVFP4


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test decides from its own environment; the process's choice is restored after."""
    library.reset()
    matmul.reset_choices()
    yield
    monkeypatch.undo()
    library.reset()
    matmul.reset_choices()


def test_turned_off_the_pytorch_path_runs_and_the_status_says_why(monkeypatch):
    monkeypatch.setenv(library.OFF_ENV, "0")
    why = kernels.unavailable("cpu", torch.device("cpu"))
    assert why == f"turned off by {library.OFF_ENV}=0"
    choice = matmul.describe("cpu", "NVFP4")
    assert choice.path == "dequantize" and choice.note == f"CPU kernels turned off by {library.OFF_ENV}=0"
    model = ElasticModel.load(DEMO_NVFP4)
    assert model.compute_path() == ("NVFP4 weights decoded exactly by byte table + matmul (CPU) "
                                    f"(CPU kernels turned off by {library.OFF_ENV}=0)")
    cache = model.new_cache("1.5M", 16)
    assert torch.isfinite(model.forward("1.5M", cache, [1, 2, 3])).all()


def test_a_large_bf16_checkpoint_keeps_fp32_without_the_kernels(monkeypatch):
    """Without native BF16 matmuls or the kernels, BF16 weights become fp32 copies (as before)."""
    monkeypatch.setenv(library.OFF_ENV, "0")
    monkeypatch.setattr(device, "cpu_runs_bf16", lambda: False)
    assert device.pick_device("cpu", None, 2 << 30)[1] == torch.float32


def test_not_built(monkeypatch, tmp_path):
    monkeypatch.setenv(library.DIR_ENV, str(tmp_path))
    assert library.problem().startswith("not built (installer/setup.sh builds it")
    assert matmul.describe("cpu", "FP8").path == "dequantize"


def test_a_failed_build_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv(library.DIR_ENV, str(tmp_path))
    monkeypatch.setattr(library, "compiler", lambda: None)
    ok, line = library.build()
    assert not ok and "no C++ compiler was found" in line and "the PyTorch path runs instead" in line
    record = json.loads((library.folder() / library.RECORD).read_text())
    assert record["ok"] is False and record["tag"] == library.tag()
    library.reset()
    assert library.problem().startswith("not built: no C++ compiler was found")


def test_a_build_is_of_its_sources_and_torch(monkeypatch, tmp_path):
    """A changed source, or another torch, is another tag: an old build is never loaded."""
    sources = shutil.copytree(library.SOURCES, tmp_path / "csrc")
    monkeypatch.setattr(library, "SOURCES", sources)
    before = library.tag()
    (sources / "isa_x86.inc").write_text((sources / "isa_x86.inc").read_text() + "\n// changed\n")
    changed = library.tag()
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert len({before, changed, library.tag()}) == 3
    assert library.module_name().endswith(library.tag())


def test_a_current_build_is_rebuilt_for_another_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv(library.DIR_ENV, str(tmp_path))
    where = library.folder()
    where.mkdir(parents=True)
    (where / (library.module_name() + ".so")).write_bytes(b"")
    (where / library.RECORD).write_text(json.dumps({"ok": True, "compiler": "g++ 11"}))
    calls = []
    monkeypatch.setattr(library.subprocess, "run", lambda *a, **k: calls.append(a) or _Done())
    monkeypatch.setattr(library, "compiler", lambda: "g++ 11")
    assert library.build() == (True, f"CPU kernels already built ({where})") and not calls
    monkeypatch.setattr(library, "compiler", lambda: "g++ 12")
    ok, line = library.build()  # the fake compile writes no library: a failed build, named
    assert calls and not ok and "g++ 12" in line


class _Done:
    returncode, stdout, stderr = 0, "", ""


def test_an_isa_this_cpu_does_not_run_is_refused(monkeypatch):
    if library.load() is None:
        pytest.skip(f"CPU kernels not available: {library.problem()}")
    library.reset()
    monkeypatch.setenv(library.ISA_ENV, "vax")
    assert "ELASTIC_CHAT_CPU_ISA=vax asked for a path this CPU does not run" in library.problem()


def test_a_path_that_fails_its_self_test_is_dropped_for_the_next():
    """A wrong kernel (one that scales every output by 1.1) is caught and the next path is used."""
    good = _Reference("good")
    bad = _Reference("bad", factor=1.1)
    module = _Paths([bad, good])
    problem, dropped = self_test.first_good(module)
    assert problem is None and module.isa() == "good" and len(dropped) == 1 and dropped[0].startswith("bad: NVFP4")
    problem, dropped = self_test.first_good(_Paths([bad]))
    assert problem.startswith("no kernel path passed its self-test (bad: NVFP4, 1 token:")


class _Reference:
    """A stand-in kernel path: the exact reference, times `factor`."""

    def __init__(self, name, factor=1.0):
        self.name, self.factor = name, factor

    def linear(self, x, fmt, data, scales, scale2, exact):
        from runtime.checkpoint.quant import PackedFP8, PackedNVFP4

        w = {0: lambda: PackedNVFP4(data, scales, scale2), 1: lambda: PackedFP8(data, scale2),
             2: lambda: data}[fmt]()
        dense = w.float() if isinstance(w, torch.Tensor) else w.dequantize(torch.float32)
        return x.float() @ dense.T * self.factor


class _Paths:
    def __init__(self, paths):
        self.paths, self.current = paths, paths[0]

    def isas(self):
        return [p.name for p in self.paths]

    def isa(self):
        return self.current.name

    def set_isa(self, name):
        self.current = next(p for p in self.paths if p.name == name)

    def linear(self, *args):
        return self.current.linear(*args)
