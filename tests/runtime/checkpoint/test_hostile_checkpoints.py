"""Damaged and hostile checkpoint files, by class: config.json, elastic.json, the quantization
config, the shard index, safetensors headers, tokenizer files and the chat template.

Every variant must give one `CheckpointError` line naming the file, never a traceback, and
`check_checkpoint` (what `models verify` runs) must refuse exactly what loading refuses, with
the same message: they are one validation.
"""

import json
import os
import shutil
import struct
import threading

import pytest

from runtime import ElasticModel
from runtime.checkpoint.check import check_checkpoint, inspect_checkpoint
from runtime.errors import CheckpointError, ElasticError
from tests.paths import ROOT

DEMO_NVFP4 = ROOT / "assets" / "demo-nvfp4"
NAN, INF = float("nan"), float("inf")


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # json.dumps writes NaN/Infinity as the bare words


def read_raw(path):
    blob = path.read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_raw(path, header, data):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def edit_header(folder, change, file="model.safetensors"):
    path = folder / file
    header, data = read_raw(path)
    result = change(header, data)
    header, data = result if isinstance(result, tuple) else (result, data)
    write_raw(path, header, data)


def refused_alike(folder) -> str:
    """check_checkpoint and loading both refuse, with the same one-line message."""
    with pytest.raises(CheckpointError) as checked:
        check_checkpoint(folder)
    with pytest.raises(CheckpointError) as loaded:
        ElasticModel.load(folder)
    msg = str(checked.value)
    import os
    if os.environ.get("SHOW"):
        print("\nMSG", msg.split(": ", 1)[1] if ": " in msg else msg)
    assert msg == str(loaded.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def first_tensor(header, suffix=""):
    return next(n for n in header if n != "__metadata__" and n.endswith(suffix))


# ----------------------------------------------------------------------------- config.json

CONFIG_VARIANTS = [
    ("hidden_size", "64"), ("hidden_size", 64.5), ("hidden_size", NAN), ("hidden_size", INF), ("hidden_size", 0),
    ("hidden_size", -64), ("hidden_size", True), ("hidden_size", [64]), ("hidden_size", 10 ** 9),
    ("n_routed_experts", 10 ** 9), ("n_routed_experts", 0), ("n_routed_experts", NAN), ("n_routed_experts", "8"),
    ("n_routed_experts", {"n": 8}),
    ("num_attention_heads", 0), ("num_attention_heads", None), ("head_dim", -1), ("vocab_size", 10 ** 12),
    ("layer_norm_epsilon", NAN), ("layer_norm_epsilon", 0), ("layer_norm_epsilon", "1e-5"), ("layer_norm_epsilon", INF),
    ("routed_scaling_factor", NAN), ("routed_scaling_factor", INF), ("routed_scaling_factor", -1),
    ("routed_scaling_factor", "2.5"), ("time_step_min", NAN), ("time_step_min", -0.1),
    ("layers_block_type", "linear_attention"), ("layers_block_type", [1, 2]), ("layers_block_type", ["moe"] * 5000),
    ("layers_block_type", ["warp_drive"]), ("use_bias", "yes"), ("mlp_bias", 1), ("norm_topk_prob", "true"),
    ("eos_token_id", "x"), ("eos_token_id", [4, "a"]), ("eos_token_id", 10 ** 9), ("bos_token_id", -1),
    ("time_step_limit", "fast"), ("time_step_limit", [0.0, NAN]), ("model_type", ["nemotron_h"]),
    ("num_experts_per_tok", 100), ("n_group", 3), ("conv_kernel", 1), ("tie_word_embeddings", "no"),
    ("mamba_num_heads", 8192), ("moe_intermediate_size", 1 << 20),
]


@pytest.mark.parametrize("key,value", CONFIG_VARIANTS, ids=[f"{k}={v!r}"[:40] for k, v in CONFIG_VARIANTS])
def test_config_values(hybrid_copy, key, value):
    edit_json(hybrid_copy / "config.json", lambda c: c.update({key: value}))
    msg = refused_alike(hybrid_copy)
    assert "config.json" in msg or "model.safetensors" in msg


@pytest.mark.parametrize("text", ["[1, 2]", "\"config\"", "{", "", "{\"model_type\": \"nemotron_h\"} trailing"])
def test_config_not_an_object(hybrid_copy, text):
    (hybrid_copy / "config.json").write_text(text)
    assert "config.json" in refused_alike(hybrid_copy)


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000,
                                  '{"model_type": "nemotron_h", "hidden_size": {"__float__": "abc"}}',
                                  '{"model_type": "nemotron_h", "hidden_size": {"__float__": [1]}}'])
def test_config_json_oddities(hybrid_copy, text):
    (hybrid_copy / "config.json").write_text(text)
    assert "config.json" in refused_alike(hybrid_copy)


def test_config_too_large(hybrid_copy):
    with open(hybrid_copy / "config.json", "r+b") as f:  # sparse: costs no disk
        f.truncate(65 << 20)
    assert "larger than" in refused_alike(hybrid_copy)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "elastic.json", "tokenizer_config.json",
                                  "special_tokens_map.json", "chat_template.jinja"])
def test_a_named_pipe_never_blocks(hybrid_copy, name):
    """A pipe in place of a file would block open() forever; run in a thread to fail, not hang."""
    (hybrid_copy / name).unlink(missing_ok=True)
    os.mkfifo(hybrid_copy / name)
    result = {}

    def check():
        try:
            check_checkpoint(hybrid_copy)
        except CheckpointError as e:
            result["error"] = str(e)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "check_checkpoint blocked on a named pipe"
    assert name in result["error"] and "regular file" in result["error"]


def test_config_not_utf8(hybrid_copy):
    (hybrid_copy / "config.json").write_bytes(b"{\"model_type\": \"\xff\xfe\"}")
    assert "not a UTF-8 text file" in refused_alike(hybrid_copy)


def test_absurd_sizes_are_refused_by_arithmetic(hybrid_copy):
    """Within each field's bound but not what the files hold: refused from the header, no listing of
    16384 experts per layer, nothing allocated."""
    edit_json(hybrid_copy / "config.json", lambda c: c.update(n_routed_experts=16384, num_experts_per_tok=2))
    (hybrid_copy / "elastic.json").unlink()
    msg = refused_alike(hybrid_copy)
    assert "tensors but the weight files hold" in msg or "parameters" in msg


def test_absurd_sizes_are_refused_from_the_config_alone(hybrid_copy):
    """Tiny widths but 1024 MoE layers of 16384 experts: 33M tensor names that any code listing them
    (the planner, the check) would build; refused before anyone does."""
    edit_json(hybrid_copy / "config.json", lambda c: c.update(
        layers_block_type=["moe"] * 1024, n_routed_experts=16384, num_experts_per_tok=1, hidden_size=16,
        moe_intermediate_size=1, moe_shared_expert_intermediate_size=1))
    assert "expert weight tensors" in refused_alike(hybrid_copy)


# ----------------------------------------------------------------------------- elastic.json

ELASTIC_VARIANTS = [
    lambda e: e.update(submodels={"full": {}}),
    lambda e: e.update(submodels=[]),
    lambda e: e["submodels"][1].update(name="mid\x1b[31m"),
    lambda e: e["submodels"][1].update(name="x" * 1000),
    lambda e: e["submodels"][1].update(name=" mid"),
    lambda e: e["submodels"][1].update(name=5),
    lambda e: e.update(max_thinking_tokens="many"),
    lambda e: e.update(max_thinking_tokens=-1),
    lambda e: e.update(max_thinking_tokens=NAN),
    lambda e: e["submodels"][1].update(hidden_size=None),
    lambda e: e["submodels"][1].update(n_routed_experts=None),
    lambda e: e["submodels"][1].update(hidden_size="48"),
    lambda e: e["submodels"][1].update(hidden_size=48.0),
    lambda e: e["submodels"][1].update(mamba_num_heads=NAN),
    lambda e: e["submodels"][1].update(moe_intermediate_size=[24, "x", 24, 24, 24, 24]),
    lambda e: e.update(submodels=e["submodels"] + [{"name": f"s{i}"} for i in range(70)]),
    lambda e: e.update(format=["elastic-nemotron-h/1"]),
]


@pytest.mark.parametrize("change", ELASTIC_VARIANTS, ids=[f"elastic{i}" for i in range(len(ELASTIC_VARIANTS))])
def test_elastic_values(hybrid_copy, change):
    edit_json(hybrid_copy / "elastic.json", change)
    msg = refused_alike(hybrid_copy)
    assert "elastic.json" in msg and "\x1b" not in msg


def test_elastic_not_an_object(hybrid_copy):
    (hybrid_copy / "elastic.json").write_text("[]")
    assert "elastic.json: expected a JSON object" in refused_alike(hybrid_copy)


# ----------------------------------------------------------------------------- safetensors headers

def _set(field, value, suffix="norm.weight"):
    def change(header, data):
        header[first_tensor(header, suffix)][field] = value
        return header
    return change


def _overlap(header, data):
    names = sorted((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"][0])
    a, b = names[0], names[1]
    size = header[b]["data_offsets"][1] - header[b]["data_offsets"][0]
    start = header[a]["data_offsets"][0]
    header[b]["data_offsets"] = [start, start + size]  # b now reads a's bytes
    return header


def _gap(header, data):
    names = sorted((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"][0])
    last = names[-1]
    header[last]["data_offsets"] = [o + 4 for o in header[last]["data_offsets"]]
    return header, data + b"\0" * 4


def _duplicate(header, data):
    raw = json.dumps(header).encode()
    name = first_tensor(header)
    entry = json.dumps({name: header[name]})[1:-1].encode()
    return raw[:-1] + b", " + entry + b"}", data


def _deep(header, data):
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    deep = b"[" * 100000 + b"]" * 100000
    return raw[:-1] + b', "deep": ' + deep + b"}", data


HEADER_VARIANTS = {
    "dtype int": _set("dtype", 5), "dtype unknown": _set("dtype", "Q8_K"), "dtype null": _set("dtype", None),
    "shape string": _set("shape", "64"), "shape floats": _set("shape", [64.0]), "shape negative": _set("shape", [-64]),
    "shape bools": _set("shape", [True]), "shape nested": _set("shape", [[64]]), "shape 9 dims": _set("shape", [1] * 9),
    "offsets one": _set("data_offsets", [0]), "offsets strings": _set("data_offsets", ["0", "256"]),
    "offsets reversed": _set("data_offsets", [256, 0]), "offsets huge": _set("data_offsets", [0, 10 ** 20]),
    "offsets floats": _set("data_offsets", [0.0, 256.0]),
    "entry string": lambda h, d: {**h, first_tensor(h): "x"},
    "overlap": _overlap, "gap": _gap,
    "trailing bytes": lambda h, d: (h, d + b"extra"),
    "truncated": lambda h, d: (h, d[:-10]),
    "metadata int": lambda h, d: {**h, "__metadata__": {"format": 5}},
    "metadata list": lambda h, d: {**h, "__metadata__": ["pt"]},
    "header list": lambda h, d: (b"[1, 2]", d),
    "header nan": lambda h, d: (json.dumps(h).encode()[:-1] + b', "x": NaN}', d),
    "header not utf8": lambda h, d: (b'{"\xff": 1}', d),
    "duplicate name": _duplicate,
    "deep nesting": _deep,
    "header length huge": lambda h, d: (json.dumps(h).encode() + b" " * 0, d),
}


@pytest.mark.parametrize("name", list(HEADER_VARIANTS))
def test_safetensors_headers(hybrid_copy, name):
    if name == "header length huge":
        path = hybrid_copy / "model.safetensors"
        blob = path.read_bytes()
        path.write_bytes(struct.pack("<Q", 2 ** 63) + blob[8:])
    else:
        edit_header(hybrid_copy, HEADER_VARIANTS[name])
    msg = refused_alike(hybrid_copy)
    assert "model.safetensors" in msg


# ----------------------------------------------------------------------------- the shard index

INDEX_VARIANTS = [
    lambda i: i.update(weight_map=list(i["weight_map"])),
    lambda i: i.update(weight_map={k: 5 for k in i["weight_map"]}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): ["model-00001-of-00002.safetensors"]}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): {"file": "x"}}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "../model.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "/etc/passwd"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "C:\\evil.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "sub/dir.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "..\\..\\x.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "weights.bin"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "a\0b.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): ".hidden.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "missing.safetensors"}),
    lambda i: i.update(metadata=["total_size"]),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "NUL.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "com1.x.safetensors"}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "model.safetensors "}),
    lambda i: i["weight_map"].update({next(iter(i["weight_map"])): "\x1b[2Jx.safetensors"}),
    lambda i: i.update(weight_map={}),
]


@pytest.mark.parametrize("change", INDEX_VARIANTS, ids=[f"index{i}" for i in range(len(INDEX_VARIANTS))])
def test_shard_index(checkpoints, tmp_path, change):
    folder = shutil.copytree(checkpoints["grouped"], tmp_path / "g")
    outside = tmp_path / "model.safetensors"  # a real file one level up that a traversal would reach
    shutil.copy(next(folder.glob("model-*.safetensors")), outside)
    edit_json(folder / "model.safetensors.index.json", change)
    msg = refused_alike(folder)
    assert "index.json" in msg or "missing.safetensors" in msg


def test_shard_with_damaged_header(checkpoints, tmp_path):
    folder = shutil.copytree(checkpoints["grouped"], tmp_path / "g")
    shard = sorted(folder.glob("model-*.safetensors"))[0]
    edit_header(folder, _set("dtype", 7, suffix=""), file=shard.name)
    assert shard.name in refused_alike(folder)


# ----------------------------------------------------------------------------- quantization config

@pytest.fixture
def nvfp4_copy(tmp_path):
    return shutil.copytree(DEMO_NVFP4, tmp_path / "nvfp4")


QUANT_VARIANTS = [
    lambda q: q.update(quantization=["NVFP4"]),
    lambda q: q["quantization"].update(quant_algo=5),
    lambda q: q["quantization"].update(quant_algo="INT4_AWQ"),
    lambda q: q["quantization"].update(exclude_modules="lm_head"),
    lambda q: q["quantization"].update(exclude_modules=[1, 2]),
    lambda q: q["quantization"].update(group_size="16"),
    lambda q: q["quantization"].update(group_size=32),
    lambda q: q["quantization"].update(group_size=NAN),
    lambda q: q["quantization"].update(quant_algo="FP8"),  # the tensors are NVFP4
]


@pytest.mark.parametrize("change", QUANT_VARIANTS, ids=[f"quant{i}" for i in range(len(QUANT_VARIANTS))])
def test_quant_config(nvfp4_copy, change):
    edit_json(nvfp4_copy / "hf_quant_config.json", change)
    assert "nvfp4" in refused_alike(nvfp4_copy)


@pytest.mark.parametrize("value", ["NVFP4", ["NVFP4"], 5])
def test_quantization_config_in_config_json(nvfp4_copy, value):
    (nvfp4_copy / "hf_quant_config.json").unlink()
    edit_json(nvfp4_copy / "config.json", lambda c: c.update(quantization_config=value))
    assert "config.json" in refused_alike(nvfp4_copy)


def test_nvfp4_nesting_that_breaks_blocks_is_refused_by_verify_too(nvfp4_copy):
    """Loading builds every submodel as views; a width that breaks a 16-wide block fails there, so
    the check must find it from the headers as well."""
    edit_json(nvfp4_copy / "elastic.json", lambda e: e["submodels"][1].update(hidden_size=120))
    msg = refused_alike(nvfp4_copy)
    assert "16" in msg


def test_the_shipped_checkpoints_pass(checkpoints):
    for folder in (*checkpoints.values(), DEMO_NVFP4, ROOT / "assets" / "demo"):
        check_checkpoint(folder)
        assert inspect_checkpoint(folder).submodels


# ----------------------------------------------------------------------------- tokenizer and template

TOKENIZER_VARIANTS = [
    ("tokenizer.json", "{not json"),
    ("tokenizer.json", "[]"),
    ("tokenizer.json", "{\"model\": 5}"),
    ("tokenizer_config.json", "[]"),
    ("tokenizer_config.json", json.dumps({"chat_template": 5})),
    ("tokenizer_config.json", json.dumps({"chat_template": [{"name": 1}]})),
    ("tokenizer_config.json", json.dumps({"chat_template": "{% for %}"})),
    ("tokenizer_config.json", json.dumps({"chat_template": "{{ x" * 10})),
    ("tokenizer_config.json", json.dumps({"eos_token": 5})),
    ("tokenizer_config.json", json.dumps({"added_tokens_decoder": {"x": 1}})),
    ("tokenizer_config.json", json.dumps({"model_max_length": "big"})),
    ("chat_template.jinja", "{% if %}"),
    ("chat_template.jinja", b"\xff\xfe{{ 1 }}"),
    ("chat_template.jinja", "x" * (2 << 20)),
]


@pytest.mark.parametrize("name,content", TOKENIZER_VARIANTS,
                         ids=[f"{n}{i}" for i, (n, _) in enumerate(TOKENIZER_VARIANTS)])
def test_tokenizer_files(hybrid_copy, name, content):
    """Refused by verify and by the engine's tokenizer loading alike, as one line."""
    from runtime.chat_format import ChatFormat

    path = hybrid_copy / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    with pytest.raises(CheckpointError) as checked:
        check_checkpoint(hybrid_copy)
    with pytest.raises(ElasticError) as loaded:
        ChatFormat(hybrid_copy)
    for e in (checked.value, loaded.value):
        assert "\n" not in str(e) and "Traceback" not in str(e)
    assert name in str(checked.value) or "tokenizer" in str(checked.value)


def test_no_tokenizer(hybrid_copy):
    (hybrid_copy / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="has no tokenizer"):
        check_checkpoint(hybrid_copy)
    ElasticModel.load(hybrid_copy)  # scoring needs no tokenizer


# ----------------------------------------------------------------------------- random damage

ODD_VALUES = [None, True, 0, -1, 1.5, NAN, INF, 10 ** 30, "", "x", [], [1], {}, {"a": 1}, "\x1b[2J", 2 ** 63]


def _replace_somewhere(obj, rnd):
    """Replaces one value at a random depth of a JSON object with an odd one."""
    while True:
        if isinstance(obj, dict) and obj:
            key = rnd.choice(list(obj))
        elif isinstance(obj, list) and obj:
            key = rnd.randrange(len(obj))
        else:
            return
        if not isinstance(obj[key], (dict, list)) or rnd.random() < 0.3:
            obj[key] = rnd.choice(ODD_VALUES)
            return
        obj = obj[key]


@pytest.mark.parametrize("seed", range(4))
def test_random_damage_is_always_one_line_or_loads(checkpoints, tmp_path, seed):
    """Held-out style variants: random odd values anywhere in the JSON files and the headers, random
    bytes in a header. Loading either works or says one line; it never raises anything else."""
    import random

    rnd = random.Random(seed)
    for trial in range(12):
        folder = shutil.copytree(checkpoints["grouped"], tmp_path / f"c{trial}")
        kind = rnd.choice(["config.json", "elastic.json", "model.safetensors.index.json", "header", "bytes"])
        if kind.endswith(".json"):
            data = json.loads((folder / kind).read_text())
            _replace_somewhere(data, rnd)
            (folder / kind).write_text(json.dumps(data))
        else:
            shard = rnd.choice(sorted(folder.glob("*.safetensors")))
            header, data = read_raw(shard)
            if kind == "header":
                _replace_somewhere(header, rnd)
                raw = json.dumps(header).encode()
            else:
                raw = bytearray(json.dumps(header).encode())
                for _ in range(rnd.randint(1, 4)):
                    raw[rnd.randrange(len(raw))] = rnd.randrange(256)
                raw = bytes(raw)
            write_raw(shard, raw, data)
        for attempt in (check_checkpoint, ElasticModel.load):
            try:
                attempt(folder)
            except CheckpointError as e:
                assert "\n" not in str(e)
