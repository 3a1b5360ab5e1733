"""The demo model's training code: data, the trainable forward, ranking, export, and a smoke run."""

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import save_file

from runtime import ElasticModel
from runtime.chat_format import ChatFormat
from runtime.score import score
from training.data import evaluation_problems, is_held_out, make_problem, training_examples
from training.importance import measure, permute_by_importance
from training.model import TrainableModel, hub_tensors

IDS = torch.tensor([[1, 17, 42, 99, 5, 250, 3, 77, 160, 12, 8, 31, 44],
                    [3, 9, 100, 2, 64, 65, 66, 200, 201, 7, 7, 7, 8]])


def test_data_is_seeded_and_held_out_problems_never_train():
    a, b = training_examples(5), training_examples(5)
    first = [next(a) for _ in range(300)]
    assert first == [next(b) for _ in range(300)]
    for ex in first:
        for m in ex.messages:
            for expr in re.findall(r"\d+(?: [+-] \d+)+", m["content"]):
                assert not is_held_out(expr)
    held = evaluation_problems(0, 50)
    assert all(is_held_out(p.expression) for p in held) and len({p.expression for p in held}) > 40


def test_problem_working_is_correct():
    import random

    rng = random.Random(1)
    for _ in range(200):
        p = make_problem(rng, 3)
        assert eval(p.expression) == p.result  # noqa: S307 (our own digits and +/-)
        assert p.steps[-1].endswith(f"= {p.result}.")


@pytest.mark.parametrize("kind", ["hybrid", "grouped"])
def test_trainable_forward_matches_the_runtime(kind, checkpoints):
    tm = TrainableModel.from_checkpoint(checkpoints[kind])
    model = ElasticModel.load(checkpoints[kind])
    for name in tm.submodels:
        with torch.no_grad():
            logp = torch.log_softmax(tm.forward(name, IDS), -1)
        for row in range(IDS.shape[0]):
            got = logp[row, :-1].gather(1, IDS[row, 1:, None])[:, 0]
            want = torch.tensor(score(model, name, IDS[row].tolist()))
            assert (got - want).abs().max() < 1e-4


def test_export_round_trip_and_gradients_reach_every_trained_weight(checkpoints, tmp_path):
    tm = TrainableModel.from_checkpoint(checkpoints["grouped"])
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(0.01 * torch.randn_like(p))
    out = shutil.copytree(checkpoints["grouped"], tmp_path / "g")
    for f in out.glob("model*.safetensors*"):
        f.unlink()
    save_file(hub_tensors(tm.cfg, tm.weights, tm.a_logs), str(out / "model.safetensors"))
    reloaded = ElasticModel.load(out)
    with torch.no_grad():
        logp = torch.log_softmax(tm.forward("half", IDS[:1]), -1)[0, :-1].gather(1, IDS[0, 1:, None])[:, 0]
    assert (torch.tensor(score(reloaded, "half", IDS[0].tolist())) - logp).abs().max() < 1e-4
    tm.forward("half", IDS).logsumexp(-1).mean().backward()
    no_grad = [p.shape for p in tm.parameters() if p.grad is None]
    assert all(len(s) == 1 for s in no_grad)  # only routers' correction biases: they choose, they do not weigh


def test_ranking_permutation_keeps_the_parent_function(checkpoints):
    tm = TrainableModel.from_checkpoint(checkpoints["hybrid"])
    with torch.no_grad():
        before = tm.forward("full", IDS)
        mask = torch.ones_like(IDS, dtype=torch.bool)
        stats = measure(tm, [(IDS, mask)])
        permute_by_importance(tm, stats)
        after = tm.forward("full", IDS)
    assert (before - after).abs().max() < 1e-4
    # and the most used expert of each MoE layer now comes first
    with torch.no_grad():
        after_stats = measure(tm, [(IDS, mask)])
    for key in stats:
        if isinstance(key, tuple) and key[0] == "experts":
            assert after_stats[key][0] == after_stats[key].max()


def test_training_smoke_run(tmp_path):
    """A few steps of the whole pipeline write a checkpoint that loads, chats and extracts."""
    from transformers import NemotronHForCausalLM

    from runtime.extract import extract
    from training.train_demo import main

    main(["--out", str(tmp_path / "demo"), "--smoke"])
    folder = tmp_path / "demo"
    table = json.loads((folder / "elastic.json").read_text())
    names = [s["name"] for s in table["submodels"]]
    assert len(names) == 3 and all(n.endswith("M") for n in names)
    model = ElasticModel.load(folder)
    assert set(model.views) == set(names)
    chat = ChatFormat(folder)
    assert chat.supports_thinking
    small = extract(folder, names[-1], tmp_path / "small")
    NemotronHForCausalLM.from_pretrained(str(small))
