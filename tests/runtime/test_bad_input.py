"""Bad checkpoints get one clear sentence naming the file and the problem, never a traceback
from deep inside torch or safetensors."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from runtime import CheckpointError, ElasticModel
from runtime.checkpoint.config import load_config, read_json
from runtime.score import score
from tests.checkpoints import rename_tensor

TOKENS = [1, 2, 3, 4, 5, 6]


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_tensors(folder, change):
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def load_error(folder) -> str:
    with pytest.raises(CheckpointError) as info:
        ElasticModel.load(folder)
    return str(info.value)


def test_missing_tensor(hybrid_copy):
    edit_tensors(hybrid_copy, lambda t: t.pop("backbone.layers.2.mixer.k_proj.weight"))
    msg = load_error(hybrid_copy)
    assert "model.safetensors" in msg and "missing" in msg and "layers.2.mixer.k_proj.weight" in msg


def test_extra_tensor(hybrid_copy):
    edit_tensors(hybrid_copy, lambda t: t.update({"backbone.layers.9.mixer.q_proj.weight": torch.zeros(2, 2)}))
    msg = load_error(hybrid_copy)
    assert "does not describe" in msg and "layers.9" in msg


def test_shape_that_does_not_match_the_config(hybrid_copy):
    edit_json(hybrid_copy / "config.json", lambda c: c.update(intermediate_size=80))
    msg = load_error(hybrid_copy)
    assert "backbone.layers.3.mixer.up_proj.weight" in msg and "[96, 64]" in msg and "[80, 64]" in msg


def test_truncated_safetensors(hybrid_copy):
    path = hybrid_copy / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    msg = load_error(hybrid_copy)
    assert "model.safetensors" in msg and "truncated" in msg and "download it again" in msg


def test_truncated_inside_the_header(hybrid_copy):
    path = hybrid_copy / "model.safetensors"
    path.write_bytes(path.read_bytes()[:50])
    assert "truncated" in load_error(hybrid_copy)


def test_corrupt_header(hybrid_copy):
    path = hybrid_copy / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:20] = b"\xff" * 12
    path.write_bytes(bytes(data))
    assert "header is corrupt" in load_error(hybrid_copy)


def test_unknown_model_type(hybrid_copy):
    edit_json(hybrid_copy / "config.json", lambda c: c.update(model_type="llama"))
    msg = load_error(hybrid_copy)
    assert "config.json" in msg and "'llama'" in msg and "nemotron_h" in msg


def test_config_not_json(hybrid_copy):
    (hybrid_copy / "config.json").write_text("{not json")
    assert "config.json: not valid JSON" in load_error(hybrid_copy)


def test_no_weights(hybrid_copy):
    (hybrid_copy / "model.safetensors").unlink()
    assert "no model.safetensors" in load_error(hybrid_copy)


def test_pickle_weights_are_refused(hybrid_copy):
    (hybrid_copy / "model.safetensors").unlink()
    (hybrid_copy / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    assert "safetensors only" in load_error(hybrid_copy)


@pytest.mark.parametrize("change,expected", [
    (lambda s: s[1].update(hidden_size=128), "hidden_size 128 must be a whole number in 1..64"),
    (lambda s: s[1].update(n_routed_experts=9), "n_routed_experts 9 must be a whole number in 1..8"),
    (lambda s: s[1].update(moe_intermediate_size=33), "moe_intermediate_size 33"),
    (lambda s: s[1].update(mamba_num_heads=5), "not divisible by n_groups"),
    (lambda s: s[1].update(n_routed_experts=1), "fewer than num_experts_per_tok"),
    (lambda s: s[1].update(mamba_num_heads=[4, 4]), "lists 2 values but the model has 6 layers"),
    (lambda s: s[1].update(hidden_size=[32] * 6), "hidden_size must be one number"),
    (lambda s: s[0].update(hidden_size=32), "must be the parent"),
    (lambda s: s[2].update(name="mid"), "appears twice"),
])
def test_elastic_widths_that_do_not_nest(hybrid_copy, change, expected):
    edit_json(hybrid_copy / "elastic.json", lambda e: change(e["submodels"]))
    msg = load_error(hybrid_copy)
    assert "elastic.json" in msg and expected in msg


def test_unknown_elastic_format(hybrid_copy):
    edit_json(hybrid_copy / "elastic.json", lambda e: e.update(format="elastic-nemotron-h/9"))
    assert "unknown format 'elastic-nemotron-h/9'" in load_error(hybrid_copy)


def test_per_layer_widths_are_accepted(hybrid_copy):
    heads = [6, 8, 8, 8, 4, 8]  # Mamba layers 0 and 4 differ
    edit_json(hybrid_copy / "elastic.json", lambda e: e["submodels"][1].update(mamba_num_heads=heads))
    model = ElasticModel.load(hybrid_copy)
    assert model.submodels["mid"].mamba_num_heads == tuple(heads)
    assert len(score(model, "mid", TOKENS)) == len(TOKENS) - 1


def test_sharded_index_with_a_missing_shard(checkpoints, tmp_path):
    import shutil

    folder = shutil.copytree(checkpoints["grouped"], tmp_path / "g")
    shard = sorted(folder.glob("model-*.safetensors"))[1]
    shard.unlink()
    msg = load_error(folder)
    assert shard.name in msg and "file not found" in msg


def test_alternative_embedding_name_loads(hybrid_copy, checkpoints):
    rename_tensor(hybrid_copy, "backbone.embeddings.weight", "backbone.embedding.weight")
    a = score(ElasticModel.load(hybrid_copy), "small", TOKENS)
    b = score(ElasticModel.load(checkpoints["hybrid"]), "small", TOKENS)
    assert a == b


def test_infinity_in_config_and_pattern_spelling(checkpoints):
    raw = read_json(checkpoints["hybrid"] / "config.json")
    assert raw["time_step_limit"][1] == float("inf")
    assert load_config(checkpoints["grouped"]).pattern == "M*EM-E"
    assert load_config(checkpoints["hybrid"]).pattern == "ME*-ME"


@pytest.mark.slow
@pytest.mark.parametrize("args,expected", [
    (["score", "--token-ids", "1,2,3"], "model_type"),
    (["score", "--token-ids", "1,x"], "--token-ids must be comma-separated whole numbers"),
    (["score", "--token-ids", "1,2", "--submodel", "nope"], "unknown submodel 'nope'"),
    (["score", "--token-ids", "1,99999"], "token ids must lie in 0..319"),
])
def test_cli_errors_are_one_line(hybrid_copy, args, expected):
    if expected == "model_type":
        edit_json(hybrid_copy / "config.json", lambda c: c.update(model_type="llama"))
    out = subprocess.run([sys.executable, "-m", "runtime", args[0], "--checkpoint", str(hybrid_copy), *args[1:]],
                         capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], out.stderr
