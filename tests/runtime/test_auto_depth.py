"""The Auto depth: thinking starts on the smallest submodel and climbs, mid-thought, when the thinker is
unsure of its next token (runtime/auto_depth.py). The tiny checkpoint is random, so a logits processor
scripts how sure the thinker is: one flat distribution is a struggle, peaked ones are easy."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from runtime import cli
from runtime.auto_depth import AutoPolicy, Escalation, Signals, Watch, parse_policy, token_signals
from runtime.controls import Controls
from runtime.depth import default_level, depth_levels, find_level, load_table, table_default_level
from runtime.engine import Engine
from runtime.errors import CheckpointError
from runtime.events import THINKING, Switch, Token
from runtime.generate import ChatRequest, stream_chat
from runtime.sampling import SamplingSettings
from runtime.server.openai_api import parse_chat
from runtime.server.serving import ApiError, ServedModel
from tests.engine_support import HELLO, assert_same_as_fresh_prefill

GREEDY = SamplingSettings(temperature=0)
SURE = AutoPolicy("entropy", 1.0, 1)  # climb when a token's entropy exceeds 1 nat
LADDER = ("small", "mid", "full")


class Script:
    """A logits processor: peaked distributions (one token possible: entropy 0), except a flat one over four
    tokens (entropy ln 4 = 1.39 nats) the first `times` times the thought reaches `struggle_at` tokens."""

    def __init__(self, engine, struggle_at=None, times=1):
        sp = engine.chat.special
        self.banned = [sp.think_end, *sp.end_of_turn]  # the budget, not the model, ends the thought
        self.struggle_at, self.times, self.start, self.flat_calls = struggle_at, times, None, 0

    def __call__(self, context, logits):
        self.start = self.start if self.start is not None else len(context)
        logits = logits.clone()
        logits[..., self.banned] = float("-inf")
        out = torch.full_like(logits, float("-inf"))
        if len(context) - self.start == self.struggle_at and self.flat_calls < self.times:
            self.flat_calls += 1
            out[..., logits.reshape(-1).topk(4).indices] = 0.0
        else:
            out[..., logits.reshape(-1).argmax()] = 0.0
        return out


def auto_reply(engine, script, controls=None, on_token=None, policy=SURE, ladder=LADDER, think=None, **kw):
    """A reply on Auto (`ladder` None: fixed on `think`), `on_token(n, controls)` called after each thinking token."""
    request = ChatRequest(HELLO, think or ladder[0], "full", kw.pop("thinking_budget", 20),
                          kw.pop("max_new_tokens", 60), GREEDY, logits_processors=(script,),
                          escalation=Escalation(ladder, policy) if ladder else None, **kw)
    controls = controls or Controls()
    events = []
    for event in stream_chat(engine, request, controls):
        events.append(event)
        if on_token and isinstance(event, Token) and event.phase == THINKING and not event.forced:
            on_token(sum(1 for e in events if isinstance(e, Token) and e.phase == THINKING), controls)
    return events


def switches(events):
    return [(e.from_submodel, e.to_submodel, e.reason) for e in events if isinstance(e, Switch)]


def thinking(events):
    return [e for e in events if isinstance(e, Token) and e.phase == THINKING]


# ---------------------------------------------------------------------- the signal


def test_signals_are_entropy_and_doubt():
    logits = torch.tensor([[2.0, 1.0, 0.0, float("-inf")]])
    p = torch.softmax(logits[0, :3], -1)
    entropy, doubt = token_signals(logits).tolist()
    assert math.isclose(entropy, float(-(p * p.log()).sum()), rel_tol=1e-5)
    assert math.isclose(doubt, float(1 - p.max()), rel_tol=1e-5)
    assert token_signals(torch.tensor([0.0, float("-inf")])).tolist() == [0.0, 0.0]  # one possible token


def test_the_watch_averages_its_window():
    watch = Watch(AutoPolicy("entropy", 1.0, 3))
    assert [watch.struggling(Signals(e, 0.0)) for e in (3.0, 0.0, 0.0, 0.1, 2.0, 1.0)] == \
        [False, False, False, False, False, True]  # 3 tokens must be seen; then (0.1 + 2 + 1) / 3 > 1
    assert not Watch(SURE).struggling(None)  # a token that was not watched


@pytest.mark.parametrize("bad, says", [
    ({"signal": "vibes"}, "signal"), ({"threshold": -1}, "threshold"), ({"threshold": float("nan")}, "threshold"),
    ({"threshold": True}, "threshold"), ({"signal": "doubt", "threshold": 2}, "threshold"), ({"window": 0}, "window"),
    ({"window": 2.5}, "window"), ({"wndow": 3}, "unknown key"), ({"measured": 5}, "measured"), ([0.5], "object"),
])
def test_a_bad_policy_is_refused_naming_the_field(bad, says):
    with pytest.raises(CheckpointError, match=says):
        parse_policy(bad, "auto_depth")


# ---------------------------------------------------------------------- climbing


@pytest.mark.slow
def test_an_easy_thought_never_climbs(engine):
    events = auto_reply(engine, Script(engine))
    assert switches(events) == [("small", "full", "answer")]
    assert {t.submodel for t in thinking(events)} == {"small"}
    assert events[-1].thinking_by_submodel == (("small", events[-1].thinking_tokens),)


def test_a_struggling_thought_climbs_one_rung_before_the_unsure_token(engine):
    events = auto_reply(engine, Script(engine, struggle_at=5))
    assert switches(events) == [("small", "mid", "escalate"), ("mid", "full", "answer")]
    tokens = thinking(events)
    # Five tokens by the small thinker, then the token it was unsure of is decided by mid: no token is lost
    # or shown twice, and the thought goes on on mid (sure again, so it climbs no further).
    assert [t.submodel for t in tokens[:6]] == ["small"] * 5 + ["mid"]
    assert {t.submodel for t in tokens[5:]} == {"mid"}
    done = events[-1]
    assert done.thinking_by_submodel == (("small", 5), ("mid", done.thinking_tokens - 5))
    assert done.budget_hit and done.answer_tokens > 0
    escalate = next(e for e in events if isinstance(e, Switch) and e.reason == "escalate")
    assert escalate.reprefill_tokens == events[0].prompt_tokens + 5  # prompt + what small thought


def test_it_climbs_step_by_step_while_each_thinker_struggles(engine):
    events = auto_reply(engine, Script(engine, struggle_at=5, times=2))
    # small and mid are both unsure of token 5; full decides it, thinks on and answers (no answer switch).
    assert switches(events) == [("small", "mid", "escalate"), ("mid", "full", "escalate")]
    done = events[-1]
    assert done.thinking_by_submodel == (("small", 5), ("full", done.thinking_tokens - 5))
    assert done.switch_from is None and done.answer_tokens > 0


def test_the_state_after_a_climb_is_a_fresh_prefill(engine, checkpoints):
    events = auto_reply(engine, Script(engine, struggle_at=4))
    assert ("small", "mid", "escalate") in switches(events)
    live = engine.cache("mid")
    prompt = events[0].prompt_tokens
    # The token mid decided in place of small's unsure one is what mid's cache holds there.
    assert live.tokens[prompt + 4] == thinking(events)[4].token_id
    assert_same_as_fresh_prefill(engine, checkpoints["hybrid"], "mid")


def test_answer_now_during_auto_still_answers(engine):
    events = auto_reply(engine, Script(engine, struggle_at=6), on_token=lambda n, c: n == 3 and c.answer_now())
    done = events[-1]
    assert done.thinking_end == "user" and done.answer_tokens > 0 and done.finish_reason in ("end_of_turn", "length")
    assert len([t for t in thinking(events) if not t.forced]) == 3
    assert switches(events) == [("small", "full", "answer")]  # it never reached the token it would climb at


def test_a_depth_the_user_chooses_stops_the_climbing(engine):
    events = auto_reply(engine, Script(engine, struggle_at=5),
                        on_token=lambda n, c: n == 2 and c.request_depth("small", 20))
    assert switches(events) == [("small", "full", "answer")]


def test_a_fixed_thought_never_climbs(engine):
    events = auto_reply(engine, Script(engine, struggle_at=5), ladder=None, think="small")
    assert switches(events) == [("small", "full", "answer")]


@pytest.mark.parametrize("start, moves", [
    ("small", []),  # Quick -> Auto: the same thinker, watched from now on
    ("mid", [("mid", "small", "depth")]),  # Deep -> Auto: Auto's thinker takes over, then climbs
])
def test_a_thought_moved_to_auto_starts_climbing(engine, start, moves):
    auto = Escalation(LADDER, SURE)
    events = auto_reply(engine, Script(engine, struggle_at=5), ladder=None, think=start,
                        on_token=lambda n, c: n == 2 and c.request_depth("small", 20, auto))
    assert switches(events) == moves + [("small", "mid", "escalate"), ("mid", "full", "answer")]
    done = events[-1]
    assert [name for name, _ in done.thinking_by_submodel] == list(dict.fromkeys([start, "small", "mid"]))


def test_the_top_of_the_ladder_is_not_watched(engine):
    """On the last rung the signals are not even computed: a struggle there changes nothing."""
    events = auto_reply(engine, Script(engine, struggle_at=3), ladder=("full",))
    assert switches(events) == [] and {t.submodel for t in thinking(events)} == {"full"}


# ---------------------------------------------------------------------- the stop


def test_auto_is_a_stop_after_the_fixed_ones(engine):
    stops = engine.depth_levels()
    assert [s.name for s in stops] == [row["name"] for row in load_table()] and stops[-1].name == "Auto"
    auto = find_level(stops, "auto")
    row = load_table()[-1]
    assert (auto.think, auto.answer, auto.escalation.ladder) == ("small", "full", ("small", "mid", "full"))
    assert auto.budget == round(row["budget"] * engine.thinking_ceiling)
    assert auto.escalation.policy == AutoPolicy(row["signal"], row["threshold"], row["window"])  # no auto_depth here
    assert all(s.escalation is None for s in stops[:-1])


def test_auto_climbs_only_to_submodels_in_memory():
    stops = depth_levels(["small", "mid", "full"], 100, loaded={"small", "mid"})
    auto = find_level(stops, "Auto")
    assert auto.escalation.ladder == ("small", "mid") and auto.answer == "mid"
    two = find_level(depth_levels(["small", "full"], 100), "Auto")  # middle is small here: climb once
    assert two.escalation.ladder == ("small", "full")


def test_the_default_stop_is_one_switch_in_the_table():
    stops = depth_levels(["small", "mid", "full"], 100)
    assert table_default_level() in {s.name for s in stops}
    assert default_level(stops).name == table_default_level()
    assert default_level(stops, default="Auto").name == "Auto"
    doubtful = depth_levels(["small", "mid", "full"], 100, estimated={"small"})
    assert default_level(doubtful, default="Auto").name == "Balanced"  # never a stop whose thinker is estimated


def test_the_checkpoint_measured_policy_wins(hybrid_copy):
    path = hybrid_copy / "elastic.json"
    data = json.loads(path.read_text())
    data["auto_depth"] = {"signal": "doubt", "threshold": 0.25, "window": 2, "measured": "a test"}
    path.write_text(json.dumps(data))
    engine = Engine.load(hybrid_copy, max_context=128)
    assert find_level(engine.depth_levels(), "Auto").escalation.policy == AutoPolicy("doubt", 0.25, 2)
    data["auto_depth"]["threshold"] = "high"
    path.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="auto_depth: threshold"):
        Engine.load(hybrid_copy, max_context=128)


# ---------------------------------------------------------------------- the command line and the server


def always_climbs(folder):
    """A checkpoint whose measured policy climbs at the first token (a random model is never sure)."""
    path = folder / "elastic.json"
    data = json.loads(path.read_text())
    data["auto_depth"] = {"signal": "entropy", "threshold": 0.0}
    path.write_text(json.dumps(data))
    return folder


@pytest.mark.slow
def test_generate_depth_auto(capsys, checkpoints, tmp_path):
    folder = always_climbs(shutil.copytree(checkpoints["hybrid"], tmp_path / "hybrid"))
    argv = ["generate", "--checkpoint", str(folder), "--prompt", "hi", "--depth", "Auto", "--max-new-tokens", "24",
            "--temperature", "0", "--max-context", "256"]
    assert cli.main(argv + ["--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    climbs = [(e["from"], e["to"], e["reason"]) for e in lines if e["type"] == "switch"]
    assert climbs == [("small", "mid", "escalate"), ("mid", "full", "escalate")]
    switch_keys = {"type", "from", "to", "reprefill_tokens", "ms", "reason"}
    assert all(set(e) == switch_keys for e in lines if e["type"] == "switch")
    done = lines[-1]
    assert set(done) == {"type", "finish_reason", "thinking_tokens", "answer_tokens", "budget_hit", "ttft_ms",
                         "tokens_per_s", "thinking_end", "thinking_by_submodel"}
    assert list(done["thinking_by_submodel"]) == ["full"]  # small and mid each gave up their first token
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "[switch small -> mid (escalate): re-prefilled" in out and "[switch mid -> full (escalate)" in out


def test_the_servers_auto_effort(engine):
    served = ServedModel.from_engine(engine)
    body = {"model": served.id, "messages": [{"role": "user", "content": "hi"}]}
    auto = find_level(engine.depth_levels(), "Auto")
    parsed = parse_chat(dict(body, reasoning_effort="auto"), served)
    assert parsed.depth == "Auto" and parsed.request.escalation == auto.escalation
    assert (parsed.request.think_submodel, parsed.request.answer_submodel) == ("small", "full")
    assert parse_chat(body, served).depth == engine.default_depth()  # no effort: the default stop
    assert parse_chat(dict(body, elastic={"depth": "auto"}), served).request.escalation == auto.escalation
    pinned = parse_chat(dict(body, model=f"{served.id}:mid", reasoning_effort="auto"), served)
    assert pinned.request.escalation is None and pinned.request.think_submodel == "mid"  # a pinned submodel stays put
    chosen = parse_chat(dict(body, reasoning_effort="auto", elastic={"think_submodel": "mid"}), served)
    assert chosen.request.escalation is None
    as_default = ServedModel(served.id, served.submodels, served.stops, served.max_context, default="Auto")
    assert parse_chat(body, as_default).request.escalation == auto.escalation
    without = ServedModel(served.id, served.submodels, served.stops[:-1], served.max_context)
    with pytest.raises(ApiError) as err:
        parse_chat(dict(body, reasoning_effort="auto"), without)
    assert err.value.status == 400 and err.value.param == "reasoning_effort" and "Auto" in err.value.message


# ---------------------------------------------------------------------- choosing the policy (training/auto_signal.py)


def test_the_measurement_helpers():
    from training.auto_signal import auroc, peak, repeated_lines, thresholds_for

    assert peak([1.0, 3.0, 2.0, 0.0], 1) == 3.0 and peak([1.0, 3.0, 2.0, 0.0], 2) == 2.5 and peak([4.0], 3) == 4.0
    assert auroc([2.0, 3.0], [1.0]) == 1.0 and auroc([1.0], [1.0, 2.0]) == 0.25 and auroc([], [1.0]) is None
    assert repeated_lines("a\nb\na\n\nb\nc") == 2
    peaks = [0.1, 0.5, 0.9, 0.3]
    assert thresholds_for(peaks, (0.25, 0.5)) == [0.7, 0.4]  # one of four above the first, two above the second
    assert all(sum(p > t for p in peaks) == k for t, k in zip(thresholds_for(peaks, (0.25, 0.5)), (1, 2)))


@pytest.mark.slow
def test_the_measurement_runs_and_its_pick_is_what_the_engine_uses(checkpoints, tmp_path):
    from training.auto_signal import markdown, measure, write_policy

    folder = shutil.copytree(checkpoints["hybrid"], tmp_path / "hybrid")
    data = json.loads((folder / "elastic.json").read_text())
    (folder / "elastic.json").write_text(json.dumps(dict(data, max_thinking_tokens=16)))  # short thoughts: fast
    result = measure(folder, n=4, seed=1, windows=(1,), fractions=(0.5,), eval_n=4, log=lambda *_: None)
    assert result["ladder"] == ["small", "mid", "full"] and result["budget"] == 8
    assert [r["signal"] for r in result["separation"]] == ["entropy, window 1", "doubt, window 1", "repeated lines",
                                                           "budget spent"]
    assert result["grid"] and all(r["auto"]["policy"]["window"] == 1 for r in result["grid"])
    assert {r["stop"] for r in result["fixed_stops"]} == {"Off", "Quick", "Balanced", "Deep", "Max"}
    assert "## Chosen" in markdown(result)
    write_policy(folder, result)
    engine = Engine.load(folder, max_context=256)
    assert find_level(engine.depth_levels(), "Auto").escalation.policy == AutoPolicy(**result["chosen"])
