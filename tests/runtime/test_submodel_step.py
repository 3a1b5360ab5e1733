"""A smaller submodel's decode step does no work its parent's does not (issue 40, part 1).

Its weights are views of the parent's (test_views.py); here the step that reads them: no op of any
submodel's decode step copies weight bytes (no clone, cast, gather or concatenation of a weight: every
matmul reads the resident copy in place, every token), and no submodel dispatches more ATen ops per
step than its parent. At the demo's widths a step's cost is its ops (benchmarks/bench_submodel_step.py),
so this is why a 0.5M thinking token is not dearer than a 1.5M one; counted, never timed.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from runtime import ElasticModel
from tests.paths import DEMO, DEMO_NVFP4

# Ops that write their input's values into new memory: a weight reaching one of them is copied.
COPYING = {"clone", "_to_copy", "to", "copy_", "cat", "stack", "index_select", "gather", "index", "take",
           "repeat", "contiguous", "expand_copy", "narrow_copy", "slice_copy", "_unsafe_index"}
PROMPT = [1, 17, 42, 99, 5, 250, 3, 77]


class StepOps(TorchDispatchMode):
    """Counts the ops dispatched, and records each copying op that reads a weight's storage."""

    def __init__(self, weight_storages: set[int]):
        super().__init__()
        self.weights, self.count, self.copies = weight_storages, 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.count += 1
        name = func.overloadpacket.__name__
        if name in COPYING:
            read = _storages(args[1:2] if name == "copy_" else (args, kwargs)) & self.weights
            if read and not read <= _storages(out):  # an output that is the weight itself is a view
                self.copies.append(str(func))
        return out


def _storages(tree) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)}


def matrices(model: ElasticModel) -> list[torch.Tensor]:
    """The weights' matrices and stacks of them (codes and block scales too); not the vectors (norms,
    biases, one global scale per matrix: the CPU kernels gather the chosen experts' few floats)."""
    return [t for t in model.weights.tensors() if t.dim() >= 2 and t.shape[-1] > 1]


def step_ops(model: ElasticModel, name: str) -> StepOps:
    """One cached decode step of `name` (after one untimed step: one-off self-tests are not the step's)."""
    cache = model.new_cache(name, 32)
    model.forward(name, cache, PROMPT)
    model.forward(name, cache, [7])
    counter = StepOps(_storages(matrices(model)))
    with counter:
        model.forward(name, cache, [9])
    return counter


@pytest.fixture(scope="module")
def models(checkpoints):
    """Dense and packed, MoE and plain MLP: the demo fp32 and NVFP4, and the test checkpoints."""
    folders = {"demo": DEMO, "demo-nvfp4": DEMO_NVFP4, **{k: checkpoints[k] for k in ("hybrid", "grouped")}}
    return {label: ElasticModel.load(folder, device="cpu") for label, folder in folders.items()}


@pytest.mark.parametrize("label", ["demo", "demo-nvfp4", "hybrid", "grouped"])
def test_no_submodel_step_copies_a_weight(models, label):
    model = models[label]
    assert len(model.views) >= 2
    for name in model.views:
        copies = step_ops(model, name).copies
        assert not copies, f"{label} {name}: its decode step copies weights: {copies}"


@pytest.mark.parametrize("label", ["demo", "demo-nvfp4", "hybrid", "grouped"])
def test_no_submodel_step_dispatches_more_than_its_parents(models, label):
    model = models[label]
    parent = step_ops(model, model.parent.name).count
    for name in list(model.views)[1:]:
        assert step_ops(model, name).count <= parent, f"{label} {name} does more per step than {model.parent.name}"


def test_the_check_sees_a_weight_copied_per_step(models, monkeypatch):
    """The checks are not blind: a step that made its weights contiguous each token would fail both, on
    the submodels (whose views are strided) and not on the parent (whose are the resident tensors)."""
    from runtime import matmul

    real = matmul.F.linear
    monkeypatch.setattr(matmul.F, "linear", lambda x, w, b=None: real(x, w.contiguous(), b))
    model = models["demo"]
    parent = step_ops(model, model.parent.name)
    assert not parent.copies
    for name in list(model.views)[1:]:
        sub = step_ops(model, name)
        assert sub.copies and sub.count > parent.count, name
