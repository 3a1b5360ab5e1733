"""Hostile input is bounded by the work it causes, never by the wall clock (issue 37, item 2).

A PC busy with other programs stretches the wall-clock time of honest work: under load the demo's own
chat template was refused ("ran for more than 3 s"). Here the clock is set forward at every reading
(a PC so busy that every step seems to take seconds) and calls are descheduled (a sleep is a thread
that does not get the CPU): honest input still passes. Hostile input is still refused by its CPU
budget, even when the clock stands still.
"""

import itertools
import json
import shutil
import threading
import time

import pytest
from transformers import PreTrainedTokenizerFast

from runtime import chat_format, chat_template, work_bound
from runtime.chat_format import ChatFormat
from runtime.chat_template import TemplateLimit, compile_template, render
from runtime.errors import CheckpointError, ElasticError, UsageError
from tests.paths import DEMO

CLOCKS = ("monotonic", "perf_counter", "time")


@pytest.fixture
def jumping_clock(monkeypatch):
    """Every wall-clock reading is ten seconds after the one before."""
    jumps = itertools.count(step=10.0)
    for name in CLOCKS:
        real = getattr(time, name)
        monkeypatch.setattr(time, name, lambda real=real: real() + next(jumps))


def _freeze(monkeypatch) -> None:
    """The wall clock never moves: only a bound on work can stop anything."""
    for name in CLOCKS:
        now = getattr(time, name)()
        monkeypatch.setattr(time, name, lambda now=now: now)


@pytest.fixture
def frozen_clock(monkeypatch):
    _freeze(monkeypatch)


def _chat(turns: int, thinking: bool = True, tools: bool = False) -> dict:
    messages = [{"role": "system", "content": "You are helpful."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: what is {i} + {i}? " * 5})
        messages.append({"role": "assistant", "content": f"It is {2 * i}.",
                         **({"reasoning_content": "adding " * 20} if thinking else {})})
    messages.append({"role": "user", "content": "and 2 + 2?"})
    offered = [{"type": "function", "function": {"name": "calculate", "description": "arithmetic",
                                                  "parameters": {"type": "object", "properties": {
                                                      "expression": {"type": "string"}}}}}] if tools else None
    return {"messages": messages, "enable_thinking": thinking, "tools": offered}


HONEST_CHATS = {"one question": _chat(0), "200 turns": _chat(200), "200 turns, no thinking": _chat(200, False),
                "with a tool offered": _chat(3, tools=True), "1000 turns": _chat(1000, False)}


@pytest.mark.parametrize("chat", HONEST_CHATS)
def test_the_demo_loads_and_renders_whatever_the_wall_clock_says(jumping_clock, chat):
    """The template compiles at load and renders each chat; the tokenizer's probe and encodes pass."""
    fmt = ChatFormat(DEMO)
    ids = fmt.prompt_ids(**HONEST_CHATS[chat])
    assert "and 2 + 2?" in fmt.decode(ids)


HONEST_TEMPLATES = [
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "{% for i in range(20000) %}{{ i }}{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for i in range(5000) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}.{% endif %}{% endmacro %}{{ f(30) }}",
    "{{ messages|tojson }}{{ (range(10000)|list|sort)|length }}",
]


@pytest.mark.parametrize("source", HONEST_TEMPLATES, ids=[f"t{i}" for i in range(len(HONEST_TEMPLATES))])
def test_honest_templates_render_whatever_the_wall_clock_says(jumping_clock, source):
    assert render(compile_template(source), messages=_chat(50)["messages"])


CPU_BURNERS = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for i in range(99999) %}{% for j in range(99999) %}{% set ns.n = ns.n + 1 %}"
    "{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{{ (range(100000)|list|sort)|length }}{% endfor %}",
    "{% for i in range(99999) %}{% for j in range(99999) %}{{ ('x' * 10000)|replace('x', 'yy')|length }}"
    "{% endfor %}{% endfor %}",
    "{% macro f(n) %}{% for i in range(1000) %}{% endfor %}{{ f(n + 1) if n < 20 else '' }}{% endmacro %}"
    "{% for i in range(99999) %}{{ f(0) }}{% endfor %}",
]


@pytest.mark.parametrize("source", CPU_BURNERS, ids=[f"t{i}" for i in range(len(CPU_BURNERS))])
def test_a_template_that_burns_cpu_is_refused_even_when_the_clock_stands_still(frozen_clock, monkeypatch, source):
    monkeypatch.setattr(chat_template, "MAX_CPU_SECONDS", 0.3)  # a small budget keeps the test short
    with pytest.raises(ElasticError, match="more than 0.3 s of CPU time") as info:
        render(compile_template(source), messages=[{"role": "user", "content": "hi"}])
    assert "\n" not in str(info.value)


def test_a_template_that_takes_long_to_compile_is_refused_by_its_work(frozen_clock, monkeypatch):
    monkeypatch.setattr(chat_template, "MAX_CPU_SECONDS", 0.05)
    source = "".join(f"{{% if x{i} %}}{{{{ y{i}|trim }}}}{{% endif %}}" for i in range(20000))
    with pytest.raises(CheckpointError, match="more than 0.05 s of CPU time"):
        compile_template(source)
    with pytest.raises(TemplateLimit):  # the guard itself, outside compile_template
        with chat_template._Guard():
            sum(i for i in range(10**9))


def _descheduled(monkeypatch, names: tuple[str, ...], seconds: float) -> None:
    """The tokenizer's calls wait `seconds` before working: the thread did not get the CPU."""
    for name in names:
        real = getattr(PreTrainedTokenizerFast, name)

        def slow(self, *args, _real=real, **kwargs):
            time.sleep(seconds)
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(PreTrainedTokenizerFast, name, slow)


@pytest.mark.parametrize("calls", [("encode",), ("__call__",), ("encode", "__call__")])
def test_a_tokenizer_that_waits_for_the_cpu_is_not_refused(monkeypatch, calls):
    """A budget of 0.2 s, every call descheduled for 0.4 s: the work is far below the budget."""
    for name in ("PROBE_CPU_SECONDS", "ENCODE_CPU_SECONDS", "PROBE_SECONDS", "ENCODE_SECONDS"):
        monkeypatch.setattr(chat_format, name, 0.2, raising=False)  # (the last two: the old wall-clock names)
    monkeypatch.setattr(chat_format, "ENCODE_CHARS_PER_S", 10 ** 9, raising=False)
    fmt = ChatFormat(DEMO) if "encode" in calls else None
    _descheduled(monkeypatch, calls, 0.4)
    fmt = fmt or ChatFormat(DEMO)
    text = "hello <|im_end|> world"
    assert fmt.decode(fmt.encode_plain(text)) == text
    assert "hello" in fmt.decode(fmt.prompt_ids([{"role": "user", "content": text}], False))


def _burning_tokenizer(tmp_path, n=4000):
    """The demo's tokenizer with n Replace normalizers: every encode burns CPU."""
    folder = tmp_path / "tok"
    folder.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        shutil.copy(DEMO / f, folder / f)
    data = json.loads((folder / "tokenizer.json").read_text())
    data["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "\u2603"}, "content": "x"}] * n}
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("text", ["word " * 4000, "x" * 20000, "日本語 " * 5000])
def test_a_tokenizer_that_burns_cpu_is_refused_even_when_the_clock_stands_still(tmp_path, monkeypatch, text):
    monkeypatch.setattr(chat_format, "PROBE_CPU_SECONDS", 60.0)
    fmt = ChatFormat(_burning_tokenizer(tmp_path))
    monkeypatch.setattr(chat_format, "ENCODE_CPU_SECONDS", 0.05)
    monkeypatch.setattr(chat_format, "ENCODE_CHARS_PER_CPU_S", 10 ** 9)
    _freeze(monkeypatch)
    with pytest.raises(UsageError, match="more than 0.05 s of CPU time"):
        fmt.encode_plain(text)


def _burn(seconds_of_cpu: float):
    start = time.thread_time()
    while time.thread_time() - start < seconds_of_cpu:
        pass


@pytest.mark.parametrize("clock", ["real", "jumping", "frozen"])
def test_waiting_for_work_counts_cpu_time_and_not_the_clock(request, clock):
    if clock != "real":
        request.getfixturevalue(f"{clock}_clock")
    sleeper = threading.Thread(target=time.sleep, args=(0.3,))
    sleeper.start()
    assert work_bound.wait_for_work(sleeper, cpu_seconds=0.05) == ""  # it waited; it did not work
    burner = threading.Thread(target=_burn, args=(5.0,), daemon=True)
    burner.start()
    assert work_bound.wait_for_work(burner, cpu_seconds=0.1) == "cpu"
    burner.join()
    stuck = threading.Event()
    waiter = threading.Thread(target=stuck.wait, daemon=True)
    waiter.start()
    assert work_bound.wait_for_work(waiter, cpu_seconds=10.0, stall_seconds=0.3) == "stalled"
    stuck.set()
