"""The demo model's training code: data, the trainable forward, ranking, export, and a smoke run."""

import json
import random
import re
import shutil

import pytest
import torch
from safetensors.torch import save_file

from runtime import ElasticModel
from runtime.chat_format import ChatFormat
from runtime.score import score
from tests.paths import DEMO
from training.data import (
    ARITHMETIC_WORDS,
    HELD_OUT_ADD,
    HELD_OUT_SUB,
    HELD_OUT_TEMPLATES,
    HELD_OUT_WORDS,
    NOISE_WORDS,
    Mix,
    Problem,
    arithmetic_example,
    column_step,
    evaluation_problems,
    example_batch,
    is_held_out,
    make_problem,
    noise_frame,
    question,
    render,
    training_examples,
)
from training.importance import measure, permute_by_importance
from training.model import TrainableModel, hub_tensors

CHECKPOINT_DEMO = DEMO
IDS = torch.tensor([[1, 17, 42, 99, 5, 250, 3, 77, 160, 12, 8, 31, 44],
                    [3, 9, 100, 2, 64, 65, 66, 200, 201, 7, 7, 7, 8]])


def test_data_is_seeded_and_held_out_problems_and_phrasings_never_train():
    a, b = training_examples(5), training_examples(5)
    first = [next(a) for _ in range(300)]
    assert first == [next(b) for _ in range(300)]
    assert example_batch(5, "parent", 7, 8) == example_batch(5, "parent", 7, 8) != example_batch(5, "parent", 8, 8)
    rng = random.Random(3)
    for _ in range(3000):
        ex, p = arithmetic_example(rng)
        assert not is_held_out(p.expression)
        if ex.thinking and "\n" in ex.thinking:
            assert ex.thinking.split("\n")[0] == p.compact  # the trace starts from the bare expression
    held_out_phrasings = [re.compile(re.escape(t).replace(r"\{e\}", ".+").replace(r"\{a\}", r"\d+")
                                     .replace(r"\{b\}", r"\d+"), re.IGNORECASE)
                          for t in HELD_OUT_TEMPLATES + HELD_OUT_ADD + HELD_OUT_SUB]
    stream = training_examples(11)
    for _ in range(3000):
        for m in next(stream).messages:
            assert not any(r.fullmatch(m["content"]) for r in held_out_phrasings), m["content"]
    held = evaluation_problems(0, 60)
    assert all(is_held_out(p.expression) for p in held) and len({p.expression for p in held}) == 60
    assert [len(p.numbers) for p in held[:6]] == [2, 3, 4, 2, 3, 4]


def test_random_frames_keep_the_sum_whole_and_never_use_a_held_out_or_arithmetic_word():
    assert {"tell", "less", "sum", "find", "hey", "equals"} <= HELD_OUT_WORDS
    assert len(NOISE_WORDS) > 200 and not {w.lower() for w in NOISE_WORDS} & (HELD_OUT_WORDS | ARITHMETIC_WORDS)
    rng = random.Random(4)
    for _ in range(2000):
        frame = noise_frame(rng)
        assert frame.count("{e}") == 1 and not frame.startswith("{e}") and not re.search(r"\d", frame)
        words = {w.lower() for w in re.findall(r"[A-Za-z']+", frame.replace("{e}", " "))}
        assert words and not words & (HELD_OUT_WORDS | ARITHMETIC_WORDS), frame
    held_out_phrasings = [re.compile(re.escape(t).replace(r"\{e\}", ".+").replace(r"\{a\}", r"\d+")
                                     .replace(r"\{b\}", r"\d+"), re.IGNORECASE)
                          for t in HELD_OUT_TEMPLATES + HELD_OUT_ADD + HELD_OUT_SUB]
    for _ in range(2000):
        p = make_problem(rng, rng.choice([2, 3, 4]))
        text = render(p, rng, frames=1.0)
        assert sorted(int(n) for n in re.findall(r"\d+", text)) == sorted(p.numbers), text  # the sum, whole
        assert not any(r.fullmatch(text) for r in held_out_phrasings), text
        held = render(p, rng, held_out_phrasing=True, frames=1.0)  # held-out checks never get frames
        assert any(r.fullmatch(held) for r in held_out_phrasings), held
    for _ in range(1000):  # a mix with frames still trains no held-out sum, and its trace starts from the sum
        ex, p = arithmetic_example(rng, Mix(frames=1.0))
        assert not is_held_out(p.expression)
        if ex.thinking and "\n" in ex.thinking:
            assert ex.thinking.split("\n")[0] == p.compact


def test_the_chat_phase_trains_on_earlier_turns_and_the_evaluation_asks_after_them():
    from training.evaluate import conversations, questions
    from training.train_demo import MAX_LEN, chat_mix, earlier_turns, encode, reply_text

    chat = ChatFormat(CHECKPOINT_DEMO)
    examples = example_batch(0, "chat", 3, 400, chat_mix(Mix()))
    turns = [earlier_turns(list(ex.messages)) for ex in examples]
    assert set(turns) == set(range(13)) and 0.5 < sum(t > 0 for t in turns) / len(turns) < 0.7
    for ex in examples:
        plain = [m for m in ex.messages if m["role"] != "system"]
        if not any(m["role"] == "tool" for m in plain):  # a tool loop adds a call and a result to its turn
            assert [m["role"] for m in plain][::2] == ["user"] * (len(plain) // 2 + 1)
        assert not any("<think>" in m["content"] for m in ex.messages)  # earlier thinking is dropped
    fitted = 0
    for ex in examples:  # conversations of up to twelve earlier turns fit, or lose their oldest turns
        ids, mask = encode(chat, ex)
        target = chat.encode(reply_text(ex))
        assert len(ids) <= MAX_LEN and sum(mask) == len(target) and ids[-len(target):] == target  # the reply whole
        full = chat.prompt_ids(list(ex.messages), ex.thinking is not None, tools=list(ex.tools) if ex.tools else None)
        fitted += len(full) + len(target) > MAX_LEN
    assert fitted / len(examples) < 0.15  # (12%: long chats with tools offered, about 550 tokens of system turn)
    asked = {p.expression for p, _ in questions(0, 60)}
    for earlier in (0, 1, 3, 9):
        talks = conversations(0, 60, earlier)
        assert len(talks) == 60 and not {p.expression for p, _ in talks} & asked
        for p, messages in talks:
            assert len(messages) == 2 * earlier + 1 and messages[-1]["role"] == "user"
            assert sorted(int(n) for n in re.findall(r"\d+", messages[-1]["content"])) == sorted(p.numbers)
            assert all(is_held_out(m["content"].split(" = ")[0]) for m in messages[1::2])  # earlier answers


def test_tool_examples_render_as_the_template_does_and_their_calls_parse_back():
    """Every reply the tool phases train on is what the chat template renders for that turn afterwards
    (so the model writes what the real template shows it), and every call in it parses back, with the
    tools offered, into the call it was written from."""
    from runtime.chat_template import render as render_template
    from runtime.tool_calls import ToolCall, assistant_message, parse_tool_calls
    from training.train_demo import chat_mix, reply_text, tools_mix

    chat = ChatFormat(CHECKPOINT_DEMO)
    seen = {"call": 0, "after the result": 0, "no": 0, "tools offered": 0, "system": 0}
    for phase, mix in (("tools", tools_mix(Mix())), ("chat", chat_mix(Mix()))):
        for ex in example_batch(0, phase, 1, 250, mix):
            thinking, tools, messages = ex.thinking is not None, list(ex.tools) if ex.tools else None, list(ex.messages)
            prompt = render_template(chat.template, messages=messages, tools=tools, add_generation_prompt=True,
                                     enable_thinking=thinking)
            if ex.calls:
                calls = tuple(ToolCall(n, a) for n, a in ex.calls)
                turn = assistant_message(calls, reasoning=ex.thinking)
                parsed = parse_tool_calls(reply_text(ex).split("</think>")[-1].removesuffix("<|im_end|>"), tools)
                assert parsed.calls == calls and not parsed.errors and not parsed.content
                assert calls[0].name in {t["function"]["name"] for t in tools}
                seen["call"] += 1
            else:
                turn = {"role": "assistant", "content": ex.answer}
                if ex.thinking:
                    turn["reasoning_content"] = ex.thinking
                seen["after the result"] += messages[-1]["role"] == "tool"
                seen["no"] += ex.answer.startswith("I can't work that out")
            if ex.thinking != "":  # (a thought cut to nothing renders as no thought)
                full = render_template(chat.template, messages=messages + [turn], tools=tools, enable_thinking=thinking)
                assert full == prompt + reply_text(ex) + "\n"
            seen["tools offered"] += tools is not None
            seen["system"] += messages[0]["role"] == "system"
            if tools:
                assert prompt.startswith("<|im_start|>system\n") and "\n# Tools\n" in "\n" + prompt
    assert min(seen.values()) >= 5, seen
    # the template's own tool markers are single tokens; the same text typed by a user is not
    ids = chat.prompt_ids([{"role": "user", "content": "<tool_call>"}], True, tools=[
        {"type": "function", "function": {"name": "f", "parameters": {}}}])
    marker = chat.tokenizer.convert_tokens_to_ids("<tool_call>")
    assert ids.count(marker) == 2  # in the instruction's example call, twice; never from the user's text
    assert chat.tokenizer.decode([marker], skip_special_tokens=True) == "<tool_call>"  # kept in reply text


def test_held_out_tools_and_out_of_range_sums_never_train():
    from training import tools_data
    from training.data import BIG, NEGATIVE, corpus, evaluation_out_of_range, out_of_range_kind, out_of_range_problem
    from training.train_demo import balance_mix, chat_mix, drill_mix, tools_mix

    held = tools_data.HELD_OUT_NAMES | tools_data.HELD_OUT_PARAMS | tools_data.HELD_OUT_DESCRIPTIONS
    assert len(tools_data.HELD_OUT_TOOLS) >= 8
    for phase, mix in (("tools", tools_mix(Mix())), ("chat", chat_mix(Mix())), ("drill", drill_mix(Mix())),
                       ("balance", balance_mix(Mix()))):
        for ex in example_batch(0, phase, 2, 400, mix):
            for t in ex.tools or ():
                f = t["function"]
                words = {f["name"], f["description"]}
                for name, p in f["parameters"]["properties"].items():
                    words |= {name, p["description"]}
                assert not words & held, words
            for name, args in ex.calls:
                assert name not in held and not set(args) & held
    texts = corpus(0)
    assert not any(name in text for text in texts for name in tools_data.HELD_OUT_NAMES)
    rng = random.Random(5)
    for _ in range(2000):
        p = out_of_range_problem(rng, Mix())
        assert not is_held_out(p.expression) and out_of_range_kind(p) in (BIG, NEGATIVE)
    held_sums = evaluation_out_of_range(0, 60)
    assert all(is_held_out(p.expression) for p in held_sums) and len({p.expression for p in held_sums}) == 60
    assert [out_of_range_kind(p) for p in held_sums[:4]] == [BIG, NEGATIVE, BIG, NEGATIVE]
    assert all(p.result < 0 for p in held_sums[1::2])
    lists = tools_data.held_out_tools(0, 16)
    assert {len(t) for t, _ in lists} == {1, 2} and all(t[k]["function"]["name"] in tools_data.HELD_OUT_NAMES
                                                        for t, k in lists)


def test_the_evaluation_scores_tool_replies_and_declines_and_writes_its_notes_under_one_heading():
    from training.evaluate import decline_reason_right, folded, notes_lines, run_sum_tool

    assert run_sum_tool({"expression": "145+23-7"}) == "161" and run_sum_tool({"x": " 5 - 12 "}) == "-7"
    assert run_sum_tool({"a": "1+1", "b": "2"}).startswith("error") and run_sum_tool({"e": "2*3"}).startswith("error")
    big, below = Problem((45, 230), ("+",)), Problem((30, 80), ("-",))
    assert decline_reason_right(big, "I can't work that out: 230 is over 99. ...")
    assert not decline_reason_right(big, "I can't work that out: 530 is over 99. ...")  # a miscopied number
    assert not decline_reason_right(big, "I can't work that out: it goes below 0.")
    assert decline_reason_right(below, "I can't work that out: it goes below 0. ...")
    assert notes_lines("## Notes\n\nText.\n") == notes_lines("Text.") == ["## Notes", "", "Text.", ""]
    assert notes_lines("## Notes, more\nText")[2] == "## Notes, more\nText"  # another heading is kept
    assert folded("a\nb") == "a\nb" and folded("\n".join(["x"] * 40), keep=5).count("\n") == 5


def test_out_of_range_working_stops_where_the_demo_cannot_go_on():
    from training.data import CAN_DO, CANNOT, USE_TOOL, Problem, decline_text, negative_step, out_of_range_thinking

    assert negative_step(60, 80) == "60-80: 0-0=0 6-8<0 so below 0"
    assert negative_step(5, 45) == "5-45: 5-5=0 0-4<0 so below 0"
    assert negative_step(12, 45) == "12-45: 12-5=7 1-4-1<0 so below 0"
    p = Problem((30, 20, 80, 5), ("+", "-", "+"))
    assert out_of_range_thinking(p, True) == ("30+20-80+5\n30+20: 0+0=0 3+2=5 so 50\n50-80: 0-0=0 5-8<0 so below 0\n"
                                              + USE_TOOL)
    big = Problem((45, 230), ("+",))
    assert out_of_range_thinking(big, False) == f"45+230\n230 is over 99\n{CANNOT}"
    assert decline_text(big) == f"I can't work that out: 230 is over 99. {CAN_DO}"
    assert decline_text(p).startswith("I can't work that out: it goes below 0.")


def test_problems_stay_in_range_and_their_working_is_correct():
    rng = random.Random(1)
    for _ in range(2000):
        p = make_problem(rng, rng.choice([2, 3, 4]))
        assert all(0 <= n <= 99 for n in p.numbers) and all(0 <= v <= 199 for v in p.partials)
        assert eval(p.expression) == p.result  # our own digits and +/-
        for step, a, op, b in zip(p.steps, p.partials, p.ops, p.numbers[1:]):
            head, columns, value = re.fullmatch(r"(\d+[+-]\d+): (.+) so (\d+)", step).groups()
            assert head == f"{a}{op}{b}" and int(value) == eval(head)
            digits, borrow_or_carry = [], 0
            for i, col in enumerate(columns.split(" ")):
                x, y = (int(d) for d in (str(a)[::-1].ljust(3, "0")[i], str(b)[::-1].ljust(3, "0")[i]))
                if op == "+":
                    assert col == f"{x}+{y}{'+1' if borrow_or_carry else ''}={x + y + borrow_or_carry}"
                    borrow_or_carry = (x + y + borrow_or_carry) // 10
                else:
                    d = x - y - borrow_or_carry
                    assert col == f"{'1' if d < 0 else ''}{x}-{y}{'-1' if borrow_or_carry else ''}={d % 10}"
                    borrow_or_carry = int(d < 0)
                digits.append(col.split("=")[1])
            # the result: the last column's value, then the earlier columns' ones digits right to left
            assert int(digits[-1] + "".join(d[-1] for d in reversed(digits[:-1]))) == int(value)
    assert column_step(51, "-", 17) == "51-17: 11-7=4 5-1-1=3 so 34"
    assert column_step(105, "-", 17) == "105-17: 15-7=8 10-1-1=8 1-0-1=0 so 88"
    assert column_step(99, "+", 99) == "99+99: 9+9=18 9+9+1=19 so 198"


def test_questions_come_in_many_phrasings():
    rng = random.Random(2)
    p = Problem((45, 23), ("+",))
    seen = {question(p, rng) for _ in range(400)}
    assert len(seen) > 40
    assert {"45+23", "45 + 23", "45 plus 23", "Add 45 and 23"} <= seen
    assert any(q.endswith("?") for q in seen) and any(not q.endswith("?") for q in seen)


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


@pytest.mark.slow
def test_training_smoke_run(tmp_path):
    """A few steps of the whole pipeline write a checkpoint that loads, chats and extracts."""
    from transformers import NemotronHForCausalLM

    from runtime.checkpoint.extract import extract
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


def test_a_run_from_a_finished_checkpoint_trains_only_its_last_phases(tmp_path, capsys):
    """--init: the shipped demo's weights and tokenizer, then the drill, balance and answer phases alone;
    not a checkpoint: refused."""
    from training.train_demo import answer_mix, balance_mix, drill_mix, main

    main(["--out", str(tmp_path / "more"), "--smoke", "--init", str(DEMO)])
    log = capsys.readouterr().out
    assert "starting from" in log and "drill step 1/2" in log and "balance step 1/2" in log
    assert "answer step 1/2" in log
    assert "parent step" not in log and "chat step" not in log
    assert (tmp_path / "more" / "tokenizer.json").read_bytes() == (DEMO / "tokenizer.json").read_bytes()
    ElasticModel.load(tmp_path / "more")
    with pytest.raises(SystemExit, match="not a finished demo checkpoint"):
        main(["--out", str(tmp_path / "x"), "--smoke", "--init", str(tmp_path)])
    drilled = [ex for ex in example_batch(0, "drill", 3, 400, drill_mix(Mix())) if ex.tools]
    calls = sum(bool(ex.calls) for ex in drilled)
    assert len(drilled) > 150 and calls > 40  # tools in most conversations, and the call trained often

    def from_results(mix) -> int:  # replies written after a tool's result
        return sum(ex.messages[-1]["role"] == "tool" for ex in example_batch(0, "answer", 3, 1000, mix))
    assert from_results(answer_mix(Mix())) > 1.6 * from_results(balance_mix(Mix())) > 0


@pytest.mark.slow
def test_a_stopped_run_resumes_to_the_same_model(tmp_path, monkeypatch):
    """Progress is saved as it goes; rerunning the same command picks up where it stopped (within a
    phase, or at the start of one) and ends with the weights an uninterrupted run gets."""
    from training import train_demo

    def run(out, state):
        train_demo.build(out, 3, 4, 3, 4, 3e-3, log=lambda *_: None, state_dir=state, checkpoint_every=0,
                         polish_steps=2)

    run(tmp_path / "straight", tmp_path / "s1")
    real_permute, real_train = train_demo.permute_by_importance, train_demo.train

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    def stop_at_elastic(tm, chat, seed, steps, batch_size, lr, names, log, phase, *rest, **kwargs):
        if phase == "elastic":
            raise KeyboardInterrupt
        return real_train(tm, chat, seed, steps, batch_size, lr, names, log, phase, *rest, **kwargs)

    progress = tmp_path / "s2" / "progress.pt"
    monkeypatch.setattr(train_demo, "permute_by_importance", stop)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed", tmp_path / "s2")
    assert torch.load(progress, weights_only=False)["step"] == 3  # within the parent phase
    monkeypatch.setattr(train_demo, "permute_by_importance", real_permute)
    monkeypatch.setattr(train_demo, "train", stop_at_elastic)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed", tmp_path / "s2")
    state = torch.load(progress, weights_only=False)
    assert (state["phase"], state["step"], state["optimizer"]) == ("elastic", 0, None)  # at a phase's start
    monkeypatch.setattr(train_demo, "train", real_train)
    with pytest.raises(SystemExit, match="other settings"):
        train_demo.build(tmp_path / "resumed", 3, 5, 3, 4, 3e-3, log=lambda *_: None, state_dir=tmp_path / "s2")
    run(tmp_path / "resumed", tmp_path / "s2")
    assert not (tmp_path / "s2").exists()  # a finished run leaves no state behind
    a, b = ElasticModel.load(tmp_path / "straight"), ElasticModel.load(tmp_path / "resumed")
    for x, y in zip(a.weights.tensors(), b.weights.tensors()):
        if x is not None:
            assert torch.equal(x, y)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="not empty"):
        run(tmp_path / "x", tmp_path / "foreign")
    assert (tmp_path / "foreign" / "notes.txt").read_text() == "mine"


def test_render_refuses_a_checkpoint_folder_for_the_nvfp4_rows(tmp_path):
    from training.evaluate import main

    earlier = tmp_path / "eval.json"
    earlier.write_text(json.dumps({"problems": 0}))
    with pytest.raises(SystemExit, match="is not a file; leave it out"):
        main(["--render", str(earlier), "--with-nvfp4", str(tmp_path), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out.md").exists()  # nothing half-written
