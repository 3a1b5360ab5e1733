"""Whole models on the CPU kernels against the same models on the exact PyTorch path (kernels turned
off in the same process): the shipped NVFP4 demo's greedy reply, and a tiny checkpoint in the real
Nemotron layout run in BF16 (so the BF16 matvec, the fused Mamba state step and the gathered
experts all take part), stepwise (the decode step) and as one prefill."""

from __future__ import annotations

import pytest
import torch

from runtime import ElasticModel, matmul
from runtime.chat_format import ChatFormat
from runtime.kernels.cpu import library
from runtime.score import score
from tests.paths import DEMO_NVFP4
from tools.real_layout import Options, generate

pytestmark = pytest.mark.skipif(library.load() is None, reason=f"CPU kernels not available: {library.problem()}")


def kernels_off(monkeypatch, off: bool) -> None:
    if off:
        monkeypatch.setenv(library.OFF_ENV, "0")
    else:
        monkeypatch.delenv(library.OFF_ENV, raising=False)
    library.reset()
    matmul.reset_choices()


@pytest.fixture(autouse=True)
def restore(monkeypatch):
    yield
    monkeypatch.undo()
    library.reset()
    matmul.reset_choices()


def greedy(model: ElasticModel, name: str, prompt: list[int], steps: int) -> tuple[list[int], torch.Tensor]:
    cache = model.new_cache(name, len(prompt) + steps + 1)
    logits = model.forward(name, cache, prompt)
    tokens, rows = [], []
    for _ in range(steps):
        tokens.append(int(logits.argmax()))
        rows.append(logits.float().clone())
        logits = model.forward(name, cache, [tokens[-1]])
    return tokens, torch.cat(rows)


def test_the_nvfp4_demo_replies_the_same(monkeypatch):
    """The same greedy reply from every submodel; the int8 activations move the logits less than
    running the model in BF16 does (the precision the app runs GPUs and large CPU models in)."""
    prompt = ChatFormat(DEMO_NVFP4).prompt_ids([{"role": "user", "content": "What is 12 + 7 - 5?"}], True)
    model = ElasticModel.load(DEMO_NVFP4)
    assert "CPU kernels" in model.compute_path()
    ours = {name: greedy(model, name, prompt, 24) for name in model.views}
    kernels_off(monkeypatch, True)
    exact = {name: greedy(model, name, prompt, 24) for name in model.views}
    bf16 = ElasticModel.load(DEMO_NVFP4, dtype="bfloat16")
    rounded = {name: greedy(bf16, name, prompt, 24) for name in model.views}
    for name in model.views:
        assert ours[name][0] == exact[name][0], name
        moved = (ours[name][1] - exact[name][1]).abs().max()
        assert 0 < moved < (rounded[name][1] - exact[name][1]).abs().max(), name


@pytest.fixture(scope="module")
def tiny_real(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("tiny-real") / "nvfp4", Options("nvfp4", "tiny"))


def test_a_tiny_real_layout_scores_the_same(monkeypatch, tiny_real):
    """Log-probabilities of 40 tokens, as one prefill and stepwise, against the exact fp32 path: on
    the kernels in fp32 (int8 activations, prefill and decode alike) they stay within twice what
    PyTorch's own BF16 run moves them (at this toy width of 64 an int8 step of a 16-block's largest
    value is about BF16's rounding of it); on the kernels in BF16, which carry both roundings, within
    twice the sum of the two moves, each measured here."""
    ids = torch.randint(3, 1000, (40,), generator=torch.Generator().manual_seed(0)).tolist()

    def scores(dtype):
        model = ElasticModel.load(tiny_real, dtype=dtype)
        name = next(iter(model.views))
        return torch.stack([torch.tensor(score(model, name, ids, stepwise=mode)) for mode in (False, True)])

    ours = {dtype: scores(dtype) for dtype in ("float32", "bfloat16")}
    kernels_off(monkeypatch, True)
    exact, rounded = scores("float32"), scores("bfloat16")
    yardstick = (rounded - exact).abs().amax(1)  # (prefill, stepwise)
    int8_moved = (ours["float32"] - exact).abs().amax(1)
    assert (int8_moved < 2 * yardstick).all(), ("float32", int8_moved, yardstick)
    both_moved = (ours["bfloat16"] - exact).abs().amax(1)
    assert (both_moved < 2 * (yardstick + int8_moved)).all(), ("bfloat16", both_moved, yardstick, int8_moved)
