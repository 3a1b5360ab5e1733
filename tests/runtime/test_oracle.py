"""The runtime against transformers' NemotronHForCausalLM, for every submodel of every tiny
checkpoint: views into the parent must compute what a physically sliced model computes."""

import json
import subprocess
import sys

import pytest
import torch

from runtime import ElasticModel
from runtime.checkpoint.extract import extract
from runtime.score import score
from tests.checkpoints import SPECS, names_of

TOL = 1e-4  # absolute, fp32
TOKENS = [1, 17, 42, 99, 5, 250, 3, 77, 160, 12, 8, 301, 44, 45, 46, 200, 19, 7, 63, 128, 2, 90, 91]


def transformers_logprobs(folder, ids):
    from transformers import NemotronHForCausalLM

    model = NemotronHForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


CASES = [(kind, name) for kind in SPECS for name in ["full"] + [s["name"] for s in SPECS[kind]["submodels"]]]


@pytest.fixture(scope="module")
def loaded(checkpoints):
    return {kind: ElasticModel.load(folder) for kind, folder in checkpoints.items()}


@pytest.mark.parametrize("kind,name", CASES)
def test_submodel_matches_transformers_on_extracted_checkpoint(kind, name, checkpoints, loaded, tmp_path):
    out = extract(checkpoints[kind], name, tmp_path / name)
    expected = transformers_logprobs(out, TOKENS)
    for stepwise in (False, True):
        got = torch.tensor(score(loaded[kind], name, TOKENS, stepwise=stepwise))
        err = (got - expected).abs().max().item()
        assert err < TOL, f"{kind}/{name} stepwise={stepwise}: max error {err}"


@pytest.mark.parametrize("kind", list(SPECS))
def test_parent_matches_transformers_on_original_checkpoint(kind, checkpoints, loaded):
    expected = transformers_logprobs(checkpoints[kind], TOKENS)
    got = torch.tensor(score(loaded[kind], "full", TOKENS))
    assert (got - expected).abs().max().item() < TOL


@pytest.mark.parametrize("kind,name", CASES)
def test_cached_decode_equals_full_forward(kind, name, loaded):
    model = loaded[kind]
    full = model.forward(name, model.new_cache(name, 64), TOKENS, all_logits=True)
    cache = model.new_cache(name, 64)
    stepped = torch.cat([model.forward(name, cache, [t]) for t in TOKENS])
    assert (full - stepped).abs().max().item() < TOL


@pytest.mark.parametrize("split", [1, 5, 8, 13])
def test_prefill_in_pieces_equals_one_prefill(split, loaded):
    """A prefill continued from a cache (chunked prefill, a follow-up turn) is exact."""
    model = loaded["hybrid"]
    whole = model.forward("mid", model.new_cache("mid", 64), TOKENS, all_logits=True)
    cache = model.new_cache("mid", 64)
    first = model.forward("mid", cache, TOKENS[:split], all_logits=True)
    rest = model.forward("mid", cache, TOKENS[split:], all_logits=True)
    assert (torch.cat([first, rest]) - whole).abs().max().item() < TOL


@pytest.mark.slow
def test_extracted_checkpoint_keeps_nested_submodels(checkpoints, tmp_path):
    out = extract(checkpoints["hybrid"], "mid", tmp_path / "mid")
    assert names_of(out) == ["mid", "small"]
    assert (out / "tokenizer.json").exists() and (out / "tokenizer_config.json").exists()
    # The smaller submodel, now nested in the extracted one, computes the same thing.
    inner = ElasticModel.load(out)
    outer = ElasticModel.load(checkpoints["hybrid"])
    assert score(inner, "small", TOKENS) == pytest.approx(score(outer, "small", TOKENS), abs=TOL)


@pytest.mark.slow
def test_score_cli_contract(checkpoints, tmp_path):
    """`score` prints {"logprobs": [...]} as its last stdout line, in both modes."""
    ids = ",".join(map(str, TOKENS[:10]))
    runs = []
    for extra in ([], ["--stepwise"]):
        out = subprocess.run([sys.executable, "-m", "runtime", "score", "--checkpoint", str(checkpoints["hybrid"]),
                              "--submodel", "small", "--token-ids", ids, *extra],
                             capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1])["logprobs"])
    assert len(runs[0]) == 9
    assert runs[0] == pytest.approx(runs[1], abs=TOL)
    small = extract(checkpoints["hybrid"], "small", tmp_path / "small")
    assert runs[0] == pytest.approx(transformers_logprobs(small, TOKENS[:10]).tolist(), abs=TOL)
