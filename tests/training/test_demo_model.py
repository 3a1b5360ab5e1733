"""The bundled demo model: the files shipped in assets/demo load, nest, extract, and chat."""

import json
import re
import subprocess
import sys

import pytest
import torch

from runtime import ElasticModel
from runtime.chat_format import ChatFormat
from runtime.checkpoint.config import count_params
from runtime.checkpoint.extract import extract
from runtime.score import score
from tests.paths import DEMO, DEMO_NVFP4
from training.tokenizer import CHAT_TEMPLATE

FILES = ("config.json", "elastic.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "generation_config.json")


@pytest.fixture(scope="module")
def demo():
    return ElasticModel.load(DEMO)


def test_shipped_files_are_complete_and_small():
    assert all((DEMO / f).is_file() for f in FILES)
    assert sum(f.stat().st_size for f in DEMO.iterdir()) < 25 * 1024 * 1024


def test_three_nested_submodels_with_the_real_models_proportions(demo):
    cfg = demo.config
    assert {"linear_attention", "full_attention", "moe"} <= set(cfg.layer_types)
    names = list(demo.submodels)
    assert len(names) == 3 and set(demo.views) == set(names)
    active = [count_params(cfg, demo.submodels[n]).active for n in names]
    ratios = [30 * a / active[0] for a in active]
    assert ratios[1] == pytest.approx(23, abs=2) and ratios[2] == pytest.approx(12, abs=2)
    for n in names:  # each name says its size
        assert n == f"{count_params(cfg, demo.submodels[n]).total / 1e6:.1f}M"


def test_tokenizer_and_template():
    chat = ChatFormat(DEMO)
    sp = chat.special
    assert None not in (sp.think_start, sp.think_end, sp.turn_start) and sp.end_of_turn
    on = chat.tokenizer.decode(chat.prompt_ids([{"role": "user", "content": "hi"}], True))
    off = chat.tokenizer.decode(chat.prompt_ids([{"role": "user", "content": "hi"}], False))
    assert on.endswith("<|im_start|>assistant\n<think>\n") and off.endswith("<think></think>")


@pytest.mark.parametrize("folder", [DEMO, DEMO_NVFP4])
def test_the_shipped_template_is_the_one_training_writes(folder):
    """training/tokenizer.py owns the demo's template; both shipped folders carry it as it is now."""
    assert json.loads((folder / "tokenizer_config.json").read_text())["chat_template"] == CHAT_TEMPLATE


@pytest.mark.parametrize("at", [1, 2, 3, 4])
def test_a_system_message_after_the_first_turn_is_a_system_turn_where_it_stands(at):
    """Issue 39: pydantic-ai's retries send one; the real Nemotron template renders it as a system turn
    (the demo's raised "a system message must come first"). The first system message still opens the
    prompt."""
    chat = ChatFormat(DEMO)
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "45+23?"}]
    turns.insert(at, {"role": "system", "content": "Answer with a number."})
    text = chat.tokenizer.decode(chat.prompt_ids(turns, False), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert text.count("<|im_start|>system") == 2
    late = text.index("<|im_start|>system\nAnswer with a number.<|im_end|>\n")
    assert text.index(turns[at - 1]["content"]) < late  # where it stands: after the turn before it
    if at + 1 < len(turns):
        assert late < text.index(turns[at + 1]["content"])


def test_digits_are_single_tokens():
    chat = ChatFormat(DEMO)
    pieces = [chat.tokenizer.decode([t]) for t in chat.encode("45+23: 5+3=8 4+2=6 so 68")]
    assert [p for p in pieces if any(c.isdigit() for c in p)] == list("452353842668")


@pytest.mark.slow
def test_the_default_depth_leaves_room_for_a_four_number_sum():
    """Balanced (the slider's default) must let the middle submodel finish the longest trace."""
    from runtime.engine import Engine
    from training.train_demo import longest_trace_tokens

    engine = Engine.load(DEMO)
    stops = {s.name: s for s in engine.depth_levels()}
    assert engine.thinking_ceiling == json.loads((DEMO / "elastic.json").read_text())["max_thinking_tokens"]
    assert stops["Balanced"].budget >= longest_trace_tokens(ChatFormat(DEMO))


@pytest.mark.slow
def test_the_default_depth_gets_held_out_sums_right():
    """Eight held-out sums in held-out phrasings at Balanced, as the app runs them. The shipped model is
    right on 95% of the 20 of docs/results/demo-eval.md (fp32 and NVFP4); a broken model, trace or depth
    table gets none or one. Six is the issue's 85% of eight, rounded down."""
    from runtime.engine import Engine
    from runtime.generate import ChatRequest, chat
    from runtime.sampling import SamplingSettings
    from training.evaluate import last_number, questions

    engine = Engine.load(DEMO)
    stop = next(s for s in engine.depth_levels() if s.name == "Balanced")
    right = 0
    for p, text in questions(5, 8):
        done = chat(engine, ChatRequest(({"role": "user", "content": text},), stop.think, stop.answer, stop.budget,
                                        600, SamplingSettings(temperature=0)))
        right += last_number(done.answer_text) == p.result
    assert right >= 6


@pytest.mark.parametrize("index", [0, 1, 2])
def test_every_submodel_extracts_and_transformers_agrees(demo, index, tmp_path):
    from transformers import NemotronHForCausalLM

    name = list(demo.submodels)[index]
    out = extract(DEMO, name, tmp_path / name)
    ids = ChatFormat(DEMO).prompt_ids([{"role": "user", "content": "What is 23 + 8 - 14?"}], True)
    ref = NemotronHForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = ref(torch.tensor([ids])).logits[0, :-1].float()
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    assert (torch.tensor(score(demo, name, ids)) - expected).abs().max() < 1e-4


@pytest.mark.slow
def test_thinks_small_and_answers_large_end_to_end():
    """Quick depth: the smallest submodel thinks, the parent answers, through `generate --json`."""
    out = subprocess.run([sys.executable, "-m", "runtime", "generate", "--checkpoint", str(DEMO), "--prompt",
                          "What is 12 + 7 - 5?", "--depth", "Quick", "--temperature", "0", "--max-new-tokens", "120",
                          "--json"], capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    names = json.loads((DEMO / "elastic.json").read_text())["submodels"]
    parent, smallest = names[0]["name"], names[-1]["name"]
    thinking = [e for e in lines if e["type"] == "token" and e["phase"] == "thinking"]
    answer = [e for e in lines if e["type"] == "token" and e["phase"] == "answer"]
    switch = [e for e in lines if e["type"] == "switch"]
    assert thinking and answer and len(switch) == 1
    assert {e["submodel"] for e in thinking} == {smallest} and {e["submodel"] for e in answer} == {parent}
    assert (switch[0]["from"], switch[0]["to"]) == (smallest, parent)
    assert lines[-1]["finish_reason"] == "end_of_turn"
    # The parent restates the problem and gives a number (right or wrong: see docs/results/demo-eval.md).
    text = "".join(e["text"] for e in answer)
    assert re.fullmatch(r"\s*12 \+ 7 - 5 = \d+\.", text), text


@pytest.mark.slow
def test_ordinary_messages_get_sensible_replies(tmp_path):
    from runtime.engine import Engine
    from runtime.generate import ChatRequest, chat
    from runtime.sampling import SamplingSettings

    engine = Engine.load(DEMO)
    parent = engine.submodels_by_size()[-1]
    for prompt, expected in [("hello", "demo model"), ("how do I get the real model?", "model manager")]:
        done = chat(engine, ChatRequest(({"role": "user", "content": prompt},), None, parent, 0, 200,
                                        SamplingSettings(temperature=0)))
        assert expected in done.answer_text and done.finish_reason == "end_of_turn"
