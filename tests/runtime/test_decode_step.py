"""The capture-safe decode step: it computes what the eager prefill computes, for every submodel and
across a switch; it never synchronises with the host (checked op by op, and on the meta device for the
real 30B-A3B shape); and decode-check keeps its command-line contract."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from runtime import ElasticModel
from runtime.cuda_graphs import ENV, GraphSet
from runtime.decode_check import OpCounter, check_submodel, random_model
from runtime.decode_step import span_for
from runtime.engine import Engine
from runtime.generate import decode_steps
from runtime.matmul import force
from runtime.sampling import DeviceSampler, SamplingSettings
from tests.checkpoints import SPECS
from tests.paths import ROOT

SHAPE_30B = ROOT / "tests" / "data" / "star-elastic-30b"
TOL = 1e-4
TOKENS = [1, 17, 42, 99, 5, 250, 3, 77, 160, 12, 8, 301, 44, 45, 46, 200, 19, 7, 63, 128]
CASES = [(kind, name) for kind in SPECS for name in ["full"] + [s["name"] for s in SPECS[kind]["submodels"]]]

# Ops that wait for the device (a value read on the host, or a shape that depends on values).
SYNCING = {"aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::nonzero_static", "aten::unique",
           "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::masked_select",
           "aten::equal", "aten::is_nonzero", "aten::tolist", "aten::bincount", "aten::repeat_interleave"}


class NoHostSync(TorchDispatchMode):
    """Records every op that would make the host wait for the device, and every copy to the CPU."""

    def __init__(self):
        super().__init__()
        self.bad = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in SYNCING:
            self.bad.append(name)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name in ("aten::_to_copy", "aten::to") and str(kwargs.get("device", "")) == "cpu" \
                and tensors and tensors[0].device.type != "cpu":
            self.bad.append(f"{name} to cpu")
        if name == "aten::copy_" and len(tensors) == 2 and tensors[0].device.type == "cpu" \
                and tensors[1].device.type != "cpu":
            self.bad.append("copy_ to cpu")
        return func(*args, **kwargs)


@pytest.fixture(scope="module")
def loaded(checkpoints):
    return {kind: ElasticModel.load(folder) for kind, folder in checkpoints.items()}


@pytest.mark.parametrize("kind,name", CASES)
def test_step_logits_equal_the_eager_forward(kind, name, loaded):
    """Token by token through DecodeStep (device tokens, the pipelined path) = one prefill."""
    model = loaded[kind]
    full = model.forward(name, model.new_cache(name, 64), TOKENS, all_logits=True)
    cache = model.new_cache(name, 64)
    model.forward(name, cache, TOKENS[:1])
    step = model.decoder(name, cache)
    got = []
    for t in TOKENS[1:]:
        got.append(step.send(torch.tensor([t])).clone())
        assert step.receive() == t
    assert cache.tokens == TOKENS
    assert (torch.cat(got) - full[1:]).abs().max().item() < TOL


def test_step_across_a_switch_equals_a_fresh_prefill(checkpoints):
    """Greedy decode on 'small' through the generate loop, switch to 'full' (re-prefill), decode on: every
    logit after the switch equals one eager forward over the whole sequence on 'full'."""
    engine = Engine.load(checkpoints["hybrid"], max_context=128)
    greedy = DeviceSampler(SamplingSettings(temperature=0))
    _, logits = engine.catch_up("small", TOKENS[:6])
    context = list(TOKENS[:6])
    steps = decode_steps(engine, "small", logits, greedy, context=context)
    for _ in range(5):
        context.append(next(steps))
    assert engine.cache("small").tokens == context  # the yielded token is already in the cache
    _, logits = engine.catch_up("full", context)
    steps = decode_steps(engine, "full", logits, greedy, context=context)
    for _ in range(6):
        context.append(next(steps))
    model = engine.model
    reference = model.forward("full", model.new_cache("full", 128), context, all_logits=True)
    # Greedy: each token the loop chose is the argmax of the eager forward before it.
    assert context[11:] == reference[10:-1].argmax(-1).tolist()
    # The last yielded token has run already: its logits are in the step's buffer.
    assert (engine.decoder("full").logits - reference[-1:]).abs().max().item() < TOL


def test_one_step_does_not_synchronise(loaded):
    model = loaded["grouped"]  # grouped routing, biases: the most branches
    cache = model.new_cache("half", 64)
    logits = model.forward("half", cache, TOKENS[:5])
    step = model.decoder("half", cache)
    sampler = DeviceSampler(SamplingSettings(temperature=0.7, top_p=0.9, top_k=50, min_p=0.01, seed=1))
    watch = NoHostSync()
    with watch:
        step.send(sampler.on_device(logits))
    assert watch.bad == []
    step.receive()


def test_signals_ride_back_with_the_token_without_another_sync(loaded):
    """Auto's signals are computed on the device beside the sampled token and copied out with it: the
    step still does not synchronise, and `receive` (the one wait per token) hands both back."""
    from runtime.auto_depth import token_signals

    model = loaded["grouped"]
    cache = model.new_cache("half", 64)
    logits = model.forward("half", cache, TOKENS[:5])
    step = model.decoder("half", cache)
    sampler = DeviceSampler(SamplingSettings(temperature=0.7, top_p=0.9, seed=1))
    p = torch.softmax(logits.reshape(-1), -1)
    expected = (float(-(p * p.log()).sum()), float(1 - p.max()))
    watch = NoHostSync()
    with watch:
        step.send(sampler.on_device(logits), token_signals(logits))
    assert watch.bad == []
    step.receive()
    assert step.signals == pytest.approx(expected, rel=1e-5)
    step.send(torch.tensor([3]))  # a token sent without signals brings none back
    assert step.receive() == 3 and step.signals is None


def test_the_detector_catches_a_sync():
    """The check above can fail: a host read and a data-dependent shape are both caught."""
    watch = NoHostSync()
    x = torch.arange(5)
    with watch:
        int(x.sum())
        x.nonzero()
    assert "aten::_local_scalar_dense" in watch.bad and "aten::nonzero" in watch.bad


def test_meta_step_of_the_test_checkpoints(checkpoints):
    """On meta, a copy to the CPU or any value read raises; the step and its sampler run to the end."""
    model = random_model(checkpoints["grouped"], "meta")
    watch = NoHostSync()
    with watch, torch.inference_mode():
        row = check_submodel(model, "half", steps=2)
    assert watch.bad == []
    assert row["device"] == "meta" and row["ops_per_step"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["", "nvfp4"])
def test_30b_shape_on_meta_every_submodel(folder):
    """The real 30B-A3B shape and its nested 23B/12B widths (BF16, and NVFP4 on the dequantizing path)."""
    model = random_model(SHAPE_30B / folder, "meta")
    assert list(model.views) == ["30B", "23B", "12B"]
    with torch.inference_mode():
        rows = [check_submodel(model, name, steps=2) for name in model.views]
    assert [r["layers"] for r in rows] == [52] * 3
    assert all(r["ops_per_step"] > 0 and r["device"] == "meta" for r in rows)
    assert model.views["12B"].layers[1].mixer.up.shape == (104, 1024, 2176)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["NVFP4", "FP8"])
def test_30b_shape_on_meta_on_the_fused_kernels(algo, tmp_path):
    """With the fused Triton kernels chosen (decode-check --kernel triton), the nested 12B's decode
    step of the real shape runs them as their shape functions: no host sync, no data-dependent shape."""
    pytest.importorskip("triton")
    folder = shutil.copytree(SHAPE_30B / "nvfp4", tmp_path / algo.lower())
    quant = json.loads((folder / "hf_quant_config.json").read_text())
    quant["quantization"]["quant_algo"] = algo
    (folder / "hf_quant_config.json").write_text(json.dumps(quant))
    model = random_model(folder, "meta")
    watch, ops = NoHostSync(), OpCounter()
    force("triton")
    try:
        with watch, ops, torch.inference_mode():
            row = check_submodel(model, "12B", steps=2)
    finally:
        force(None)
    assert watch.bad == []
    assert row["matmul_path"].startswith(f"{algo} fused Triton kernels")
    # per step: in_proj and out_proj of 17 packed Mamba layers, 2 shared and 2 gathered per MoE layer
    assert ops.ops[f"elastic_chat.{algo.lower()}_mm"] >= 2 * (2 * 17 + 4 * 23)


@pytest.mark.slow
def test_decode_check_cli_selects_the_fused_kernels():
    pytest.importorskip("triton")
    out = subprocess.run([sys.executable, "-m", "runtime", "decode-check", "--config", str(SHAPE_30B / "nvfp4"),
                          "--submodel", "12B", "--device", "meta", "--steps", "1", "--kernel", "triton"],
                         capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["submodel"] == "12B" and row["matmul_path"].startswith("NVFP4 fused Triton kernels")


@pytest.mark.slow
def test_decode_check_cli_contract(checkpoints):
    out = subprocess.run([sys.executable, "-m", "runtime", "decode-check", "--config", str(SHAPE_30B),
                          "--submodel", "23B", "--device", "meta", "--steps", "2"],
                         capture_output=True, text=True, check=True)
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert {k: last[k] for k in ("submodel", "layers", "device")} == {"submodel": "23B", "layers": 52, "device": "meta"}
    assert isinstance(last["ops_per_step"], int) and last["ops_per_step"] > 0
    assert last["matmul_path"] == "META, bfloat16 weights"  # the dense config: no packed matmuls
    out = subprocess.run([sys.executable, "-m", "runtime", "decode-check", "--config", str(checkpoints["hybrid"]),
                          "--device", "cpu", "--steps", "3"], capture_output=True, text=True, check=True)
    assert [json.loads(line)["submodel"] for line in out.stdout.strip().splitlines()] == ["full", "mid", "small"]


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["--config", "/nonexistent-folder"], "not a folder"),
    (["--config", str(SHAPE_30B), "--submodel", "99B", "--device", "meta"], "unknown submodel"),
    (["--config", str(SHAPE_30B), "--steps", "0", "--device", "meta"], "--steps"),
    (["--config", str(SHAPE_30B), "--device", "tpu"], "unknown device"),
])
def test_decode_check_bad_input_is_one_line(args, message):
    out = subprocess.run([sys.executable, "-m", "runtime", "decode-check", *args], capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_a_model_too_large_for_memory_is_refused_before_allocating(monkeypatch):
    import runtime.decode_check as dc
    from runtime.errors import UsageError

    monkeypatch.setattr(dc, "_free_bytes", lambda device: 2.0 ** 30)
    with pytest.raises(UsageError, match="need about 117.6 GiB, cpu has 1.0 GiB free; use --device meta"):
        dc.random_model(SHAPE_30B, "cpu")


@pytest.mark.slow
def test_bad_config_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    out = subprocess.run([sys.executable, "-m", "runtime", "decode-check", "--config", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "nemotron_h" in out.stderr


def test_status_names_the_decode_path(checkpoints, monkeypatch):
    engine = Engine.load(checkpoints["hybrid"], max_context=64)
    assert engine.status().decode_path == "eager (no CUDA graphs on cpu)"
    monkeypatch.setenv(ENV, "0")
    graphs = GraphSet(torch.device("cuda"))
    assert graphs.status == f"eager (turned off by {ENV})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_experts_equal_gathered_experts(dtype, loaded, monkeypatch):
    """Dense experts take one grouped matmul where it works; it computes what gathering them computes."""
    import runtime.moe as moe

    assert moe.grouped_experts(torch.device("cpu"), dtype)
    layer = loaded["hybrid"].views["mid"].layers[1]  # a MoE layer, as views into the parent
    cfg = loaded["hybrid"].config
    x = torch.randn(3, 48, generator=torch.Generator().manual_seed(0)).to(dtype)
    with torch.inference_mode():
        shared = moe.MLPWeights(layer.mixer.shared.up.to(dtype), layer.mixer.shared.down.to(dtype), None, None)
        mixer = moe.MoEWeights(layer.mixer.router, layer.mixer.router_bias, layer.mixer.up.to(dtype),
                               layer.mixer.down.to(dtype), shared)
        grouped = torch.cat([moe.moe_gathered(x, mixer, cfg), moe.moe_gathered(x[:1], mixer, cfg)])
        monkeypatch.setitem(moe._GROUPED, ("cpu", dtype), False)
        gathered = torch.cat([moe.moe_gathered(x, mixer, cfg), moe.moe_gathered(x[:1], mixer, cfg)])
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert (grouped.float() - gathered.float()).abs().max().item() < tol * max(1.0, gathered.float().abs().max().item())


def test_graphs_replay_once_captured_and_a_failed_capture_falls_back(monkeypatch):
    """The runner's logic without a GPU: eager first, then replay; a capture failure is named in the status."""
    from runtime.cuda_graphs import GraphRunner

    class FakeGraph:
        replays = 0

        def replay(self):
            FakeGraph.replays += 1

    graphs = GraphSet(torch.device("cpu"))
    graphs.reason = None  # pretend this is a GPU
    monkeypatch.setattr(GraphRunner, "_warm_up", lambda self, step: step())
    monkeypatch.setattr(GraphRunner, "_capture", lambda self, step: (FakeGraph(), torch.tensor([7])))
    runner = graphs.runner()
    calls = []
    step = lambda: calls.append(1) or torch.tensor([1])  # noqa: E731
    assert runner.run(256, step).item() == 1 and len(calls) == 1  # eager, then captured
    assert runner.run(256, step).item() == 7 and len(calls) == 1 and FakeGraph.replays == 1  # replayed
    assert graphs.status == "CUDA graph"

    def fail(self, step):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(GraphRunner, "_capture", fail)
    assert runner.run(512, step).item() == 1 and len(calls) == 2  # the eager result is still used
    assert graphs.status == "eager (capture failed: RuntimeError: operation not permitted when stream is capturing)"
    assert runner.run(512, step).item() == 1 and len(calls) == 3  # and from now on eager


def test_spans_are_few_and_cover_the_context():
    assert [span_for(n, 4096) for n in (1, 256, 257, 1000, 4096)] == [256, 256, 512, 1024, 4096]
    assert span_for(10, 64) == 64


def test_device_sampler():
    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0, -2.0]])
    assert DeviceSampler(SamplingSettings(temperature=0))(logits) == 0
    seeded = [DeviceSampler(SamplingSettings(temperature=1.0, top_p=1.0, seed=3)) for _ in range(2)]
    runs = [[s(logits) for _ in range(50)] for s in seeded]
    assert runs[0] == runs[1] and set(runs[0]) > {0}  # repeats exactly, and really samples
    top2 = DeviceSampler(SamplingSettings(temperature=2.0, top_k=2, seed=0))
    assert {top2(logits) for _ in range(100)} == {0, 1}
    nucleus = DeviceSampler(SamplingSettings(temperature=1.0, top_p=0.5, seed=0))
    assert {nucleus(logits) for _ in range(50)} == {0}
    # Frequencies follow the distribution (the exponential race is an exact sampler).
    fair = DeviceSampler(SamplingSettings(temperature=1.0, top_p=1.0, seed=0))
    counts = torch.bincount(torch.tensor([fair(torch.zeros(1, 4)) for _ in range(2000)]), minlength=4)
    assert (counts - 500).abs().max().item() < 100
