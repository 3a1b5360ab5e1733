"""One resident copy: submodels are views, memory does not grow with the number of submodels,
and a checkpoint can load only a smaller submodel's slices to fit a smaller device."""

import pytest
import torch

from runtime import ElasticModel, UsageError
from runtime.checkpoint.weights import resident_bytes
from runtime.score import score

TOKENS = [1, 17, 42, 99, 5, 250, 3, 77, 160, 12]


def storages(weights):
    return {t.untyped_storage().data_ptr() for t in weights.tensors()}


@pytest.mark.parametrize("kind", ["hybrid", "grouped"])
def test_no_submodel_owns_a_weight(kind, checkpoints):
    model = ElasticModel.load(checkpoints[kind])
    resident = storages(model.weights)
    for name, view in model.views.items():
        assert storages(view) <= resident, f"submodel {name} allocated its own tensor"
        for v, r in zip(view.tensors(), model.weights.tensors()):
            assert v.untyped_storage().data_ptr() == r.untyped_storage().data_ptr()


@pytest.mark.parametrize("kind", ["hybrid", "grouped"])
def test_all_submodels_cost_what_the_parent_costs(kind, checkpoints):
    model = ElasticModel.load(checkpoints[kind])
    parent_alone = resident_bytes(model.weights)
    everything = model.resident_bytes()
    assert len(model.views) >= 2
    assert everything <= 1.05 * parent_alone
    # Three separately loaded models would cost the sum of their sizes.
    separate = sum(resident_bytes(ElasticModel.load(checkpoints[kind], resident=n).weights) for n in model.views)
    assert separate > 1.3 * parent_alone


def test_loading_only_a_smaller_submodel(checkpoints):
    """A device too small for the parent: read only 'mid's slices; 'mid' and 'small' still run, as views
    of that one copy, and compute exactly what they compute as views of the parent."""
    full = ElasticModel.load(checkpoints["hybrid"])
    mid = ElasticModel.load(checkpoints["hybrid"], resident="mid")
    assert set(mid.views) == {"mid", "small"}
    assert mid.resident_bytes() == resident_bytes(mid.weights)
    assert mid.resident_bytes() < 0.75 * full.resident_bytes()
    for name in ("mid", "small"):
        assert score(mid, name, TOKENS) == pytest.approx(score(full, name, TOKENS), abs=1e-5)
    with pytest.raises(UsageError, match="not loaded"):
        mid.submodel("full")


def test_memory_of_the_resident_submodel_matches_it_alone(checkpoints):
    """Weights of a resident 'small' are exactly what a sliced 'small' holds (no parent left over)."""
    from runtime.checkpoint.config import count_params

    small = ElasticModel.load(checkpoints["hybrid"], resident="small")
    params = count_params(small.config, small.submodels["small"]).total
    # The resident tensors hold the submodel's parameters (fp32), the router bias and A counted once.
    assert small.resident_bytes() == pytest.approx(4 * params, rel=0.01)


def test_unknown_submodel_is_a_clear_error(checkpoints):
    with pytest.raises(UsageError, match="unknown submodel 'huge'.*full, mid, small"):
        ElasticModel.load(checkpoints["hybrid"], resident="huge")


def test_views_do_not_copy_on_forward(checkpoints):
    """Running a submodel leaves the resident tensors untouched (views are read-only in use)."""
    model = ElasticModel.load(checkpoints["hybrid"])
    before = [t.clone() for t in model.weights.tensors()]
    score(model, "small", TOKENS)
    assert all(torch.equal(a, b) for a, b in zip(before, model.weights.tensors()))
