"""Routed experts in RAM (runtime/placement.py): the split model computes what the unsplit one does, for
every submodel, in prefill and decode and across a switch; the weights stay where the placement says
(views of the file in RAM, nothing of those layers' experts on the device); the step on the real 30B
shape runs to the end on the meta device; bad placements are refused with what to type instead."""

import json
import subprocess
import sys

import pytest
import torch

from runtime import ElasticModel
from runtime.decode_check import decode_check
from runtime.engine import Engine
from runtime.errors import UsageError
from runtime.generate import ChatRequest, stream_chat
from runtime.placement import ExpertPlacement
from runtime.sampling import SamplingSettings
from tests.checkpoints import SPECS
from tests.paths import ROOT

SHAPE_30B = ROOT / "tests" / "data" / "star-elastic-30b"
TOKENS = [1, 17, 42, 99, 5, 250, 3, 77, 160, 12, 8, 301]
TOL = 1e-4


def placements(kind):
    """Every placement family on a checkpoint kind: all, the first MoE layer, and nested on each smaller submodel."""
    return ["all", "1"] + [f"nested:{s['name']}" for s in SPECS[kind]["submodels"]]


CASES = [(kind, spec) for kind in SPECS for spec in placements(kind)]


@pytest.fixture(scope="module")
def plain(checkpoints):
    return {kind: ElasticModel.load(folder) for kind, folder in checkpoints.items()}


@pytest.mark.parametrize("kind,spec", CASES)
def test_split_logits_equal_the_unsplit_model_for_every_submodel(kind, spec, plain, checkpoints):
    """Prefill logits and token-by-token decode-step logits of every submodel equal the plain model's."""
    split = ElasticModel.load(checkpoints[kind], placement=ExpertPlacement.parse(spec))
    base = plain[kind]
    for name in base.views:
        want = base.forward(name, base.new_cache(name, 32), TOKENS, all_logits=True)
        got = split.forward(name, split.new_cache(name, 32), TOKENS, all_logits=True)
        assert (got - want).abs().max().item() < TOL, (name, "prefill")
        cache = split.new_cache(name, 32)
        split.forward(name, cache, TOKENS[:1])
        step = split.decoder(name, cache)
        stepped = []
        for t in TOKENS[1:]:
            stepped.append(step.send(torch.tensor([t])).clone())
            assert step.receive() == t
        assert (torch.cat(stepped) - want[1:]).abs().max().item() < TOL, (name, "decode")


@pytest.mark.parametrize("spec", placements("hybrid"))
def test_greedy_tokens_across_a_switch_equal_the_unsplit_model(spec, checkpoints):
    """Think on the smallest submodel, answer on the parent (an exact re-prefill at the switch): the same
    greedy tokens with the experts split as without."""
    def reply(engine):
        request = ChatRequest(({"role": "user", "content": "What is 12 + 34?"},), "small", "full", 12, 24,
                              SamplingSettings(0.0))
        return [(e.submodel, e.token_id) for e in stream_chat(engine, request) if e.type == "token"]

    want = reply(Engine.load(checkpoints["hybrid"], max_context=256))
    got = reply(Engine(ElasticModel.load(checkpoints["hybrid"], placement=ExpertPlacement.parse(spec)), 256))
    assert {name for name, _ in want} == {"small", "full"}  # it did think, switch and answer
    assert got == want


def test_the_weights_live_where_the_placement_says(checkpoints):
    folder = checkpoints["hybrid"]
    model = ElasticModel.load(folder, placement=ExpertPlacement.parse("1"))
    first, second = (layer.mixer for layer in model.weights.layers if layer.kind == "moe")
    assert first.up is None and first.down is None  # nothing of the first MoE layer's experts on the device
    assert isinstance(first.host_up, list) and all(model.mapped.contains(e) for e in first.host_up + first.host_down)
    assert second.host_up is None and second.up is not None
    nested = ElasticModel.load(folder, placement=ExpertPlacement.parse("nested:mid"))
    for name, runs_alone in (("full", False), ("mid", True), ("small", True)):
        moe = [layer.mixer for layer in nested.views[name].layers if layer.kind == "moe"]
        assert all((m.host_up is None) == runs_alone for m in moe), name
        assert all((m.up is not None) == runs_alone for m in moe), name
    mid = [s for s in SPECS["hybrid"]["submodels"] if s["name"] == "mid"][0]
    root = [layer.mixer for layer in nested.weights.layers if layer.kind == "moe"][0]
    assert tuple(root.up.shape) == (mid["n_routed_experts"], mid["moe_intermediate_size"], mid["hidden_size"])
    status = Engine(nested, 64).status()
    assert "RAM (computed by the CPU): the routed experts of every MoE layer" in status.placement
    assert "mid runs there alone" in status.placement
    assert Engine(ElasticModel.load(folder), 64).status().placement == "all weights on CPU"


def test_the_decode_path_says_which_submodels_leave_the_graph(checkpoints):
    """On CUDA a submodel whose experts are in RAM cannot replay one graph; the others still can."""
    model = ElasticModel.load(checkpoints["hybrid"], placement=ExpertPlacement.parse("nested:mid"))
    model.graphs.reason = None  # as on a GPU with graphs on (nothing is run here)
    assert model.decode_path() == ("CUDA graph for mid, small; eager for full (routed experts in RAM: each such MoE "
                                   "layer copies its activations to the CPU and back)")
    everywhere = ElasticModel.load(checkpoints["hybrid"], placement=ExpertPlacement.parse("all"))
    everywhere.graphs.reason = None
    assert everywhere.decode_path().startswith("eager (routed experts in RAM")
    cache = everywhere.new_cache("full", 8)
    assert everywhere.decoder("full", cache).runner.eager is not None  # never captures


@pytest.mark.parametrize("spec", ["all", "9", "nested:12B", "nested:23B"])
def test_the_split_step_runs_to_the_end_on_meta_at_the_real_shape(spec):
    rows = decode_check(SHAPE_30B, device="meta", steps=2, placement=ExpertPlacement.parse(spec))
    assert [r["submodel"] for r in rows] == ["30B", "23B", "12B"]
    assert all(r["placement"] == spec for r in rows)
    kept = spec.split(":")[1] if ":" in spec else None
    nests = {"12B": {"12B"}, "23B": {"23B", "12B"}}.get(kept, set())
    assert {r["submodel"]: r["experts_in_ram"] for r in rows} == {n: n not in nests for n in ("30B", "23B", "12B")}


def test_decode_check_takes_the_flag():
    out = subprocess.run([sys.executable, "-m", "runtime", "decode-check", "--config", str(SHAPE_30B), "--device",
                          "meta", "--steps", "1", "--submodel", "12B", "--cpu-experts", "nested:12B"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout.splitlines()[-1])
    assert row["placement"] == "nested:12B" and row["experts_in_ram"] is False


@pytest.mark.parametrize("text,error", [
    ("some", "use none, all, a number of MoE layers"),
    ("-3", "use none, all"),
    ("nested:", "use none, all"),
    ("99999", "use none, all"),
])
def test_bad_placements_say_what_to_type(text, error):
    with pytest.raises(UsageError, match=error):
        ExpertPlacement.parse(text)


def test_placements_that_do_not_match_the_checkpoint_are_refused(checkpoints):
    with pytest.raises(UsageError, match="this model has 2 MoE layers"):
        ElasticModel.load(checkpoints["hybrid"], placement=ExpertPlacement.parse("3"))
    with pytest.raises(UsageError, match="no submodel 'tiny'.*full, mid, small"):
        ElasticModel.load(checkpoints["hybrid"], placement=ExpertPlacement.parse("nested:tiny"))
    with pytest.raises(UsageError, match="mid is not within the resident small"):
        ElasticModel.load(checkpoints["hybrid"], resident="small", placement=ExpertPlacement.parse("nested:mid"))


@pytest.mark.parametrize("text", ["none", "0", "all", "ALL", "7", "nested:12B"])
def test_a_placement_spells_back_as_it_parses(text):
    p = ExpertPlacement.parse(text)
    assert ExpertPlacement.parse(p.spec) == p


def test_generate_takes_the_flag_and_answers_as_without_it(checkpoints):
    def run(*extra):
        out = subprocess.run([sys.executable, "-m", "runtime", "generate", "--checkpoint", str(checkpoints["hybrid"]),
                              "--prompt", "hi", "--max-new-tokens", "6", "--thinking-budget", "0", "--json",
                              "--temperature", "0", *extra], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             check=False)
        return out.returncode, out.stdout, out.stderr

    code, plain, _ = run()
    assert code == 0
    code, split, err = run("--cpu-experts", "nested:small")
    assert code == 0, err
    ids = [[json.loads(line).get("token_id") for line in text.splitlines()] for text in (plain, split)]
    assert ids[0] == ids[1] and len(ids[0]) > 1
    code, _, err = run("--cpu-experts", "half")
    assert code == 2 and err.startswith("error: --cpu-experts 'half': use none, all, a number of MoE layers")


@pytest.mark.parametrize("spec", ["all", "nested:small"])
def test_decode_check_runs_the_split_step_with_values_on_the_cpu(checkpoints, spec):
    rows = decode_check(checkpoints["hybrid"], device="cpu", steps=3, placement=ExpertPlacement.parse(spec))
    assert {r["submodel"]: r["experts_in_ram"] for r in rows} == \
        {"full": True, "mid": True, "small": spec == "all"}
