"""Values from outside, by class (issue 24): a boolean is not a number, 1.0 is not a JSON integer, NaN and
infinity are not in any range, a number too small to divide by is not a temperature, a device without
values cannot compute, a full disk is one line, and a thought the model ends itself can be transplanted."""

import math
import resource
import signal
import subprocess
import sys

import pytest
import torch

from runtime.depth import depth_levels
from runtime.engine import Engine
from runtime.events import Done, Switch
from runtime.generate import ChatRequest, stream_chat
from runtime.sampling import DeviceSampler, SamplingSettings
from runtime.server.openai_api import parse_chat
from runtime.server.serving import ApiError, ServedModel
from tests.paths import DEMO, ROOT

SERVED = ServedModel("demo", ("small", "mid", "full"), tuple(depth_levels(["small", "mid", "full"], 100)), 4096)
HI = [{"role": "user", "content": "hi"}]

# ----------------------------------------------------------------------------- the server's numeric fields

INTEGER_FIELDS = ["max_tokens", "max_completion_tokens", "top_k", "seed", "thinking_token_budget",
                  "thinking_budget_tokens", "elastic.thinking_budget", "n"]
NUMBER_FIELDS = ["temperature", "top_p", "min_p"]
ZERO_FIELDS = ["presence_penalty", "frequency_penalty", "top_logprobs"]
NOT_INTEGERS = [True, False, 1.0, 2.5, math.nan, math.inf, -math.inf, 10 ** 40, -1, "1", [1], {"v": 1}]
NOT_NUMBERS = [True, False, math.nan, math.inf, -math.inf, 1e308 * 10, 10 ** 40, "0.5", [0.5], {"v": 0.5}]
NOT_ZERO = [True, False, math.nan, math.inf, 1e-300, "0", [0], {"v": 0}]


def body_with(field: str, value) -> dict:
    body = {"model": "demo", "messages": HI}
    if field.startswith("elastic."):
        body["elastic"] = {field.split(".", 1)[1]: value}
    else:
        body[field] = value
    return body


def refused(field: str, value):
    with pytest.raises(ApiError) as e:
        parse_chat(body_with(field, value), SERVED)
    assert e.value.status == 400 and e.value.param == field, e.value
    assert "\n" not in e.value.message
    return e.value


@pytest.mark.parametrize("field", INTEGER_FIELDS)
@pytest.mark.parametrize("value", NOT_INTEGERS, ids=repr)
def test_an_integer_field_refuses_booleans_decimals_and_huge_values(field, value):
    if field == "seed" and value == 10 ** 40:
        value = 2 ** 64  # just past a seed's range (10**40 is far past it too)
    refused(field, value)


@pytest.mark.parametrize("field", NUMBER_FIELDS)
@pytest.mark.parametrize("value", NOT_NUMBERS, ids=repr)
def test_a_number_field_refuses_booleans_and_non_finite_values(field, value):
    refused(field, value)


@pytest.mark.parametrize("field", ZERO_FIELDS)
@pytest.mark.parametrize("value", NOT_ZERO, ids=repr)
def test_a_field_this_server_does_not_do_is_refused_unless_absent_or_zero(field, value):
    if field == "top_logprobs" and value is False:
        value = 0.5
    refused(field, value)


@pytest.mark.parametrize("field,value", [("n", True), ("n", 1.0), ("best_of", True), ("best_of", 1.0),
                                         ("logprobs", True), ("presence_penalty", False), ("frequency_penalty", True)])
def test_the_completions_route_refuses_the_same_classes(field, value):
    from runtime.server.completions_api import parse_completion

    with pytest.raises(ApiError) as e:
        parse_completion({"model": "demo", "prompt": "hi", field: value}, SERVED)
    assert e.value.status == 400 and e.value.param == field


def test_the_fields_as_openai_clients_send_them_are_taken():
    body = dict(body_with("n", 1), max_tokens=20, top_k=0, seed=7, temperature=1, top_p=1, min_p=0.0,
                presence_penalty=0, frequency_penalty=0.0, logprobs=False, top_logprobs=0)
    parsed = parse_chat(body, SERVED)
    assert parsed.request.max_new_tokens == 20 and parsed.request.sampling.seed == 7


def test_an_integer_field_names_what_was_sent_and_the_rule():
    message = refused("max_tokens", 4.0).message
    assert message.startswith("max_tokens is 4.0; it must be a whole number") and "decimal point" in message
    assert refused("n", True).message == "n is True; it must be 1: this server returns one choice per request"


# ----------------------------------------------------------------------------- sampling

LOGITS = torch.tensor([0.5, 3.0, 2.9, -1.0, 0.0])


@pytest.mark.parametrize("temperature", [0.0, 5e-324, 1e-300, 1e-40, 1e-20, 1e-8, 1e-4])
def test_a_temperature_too_small_to_divide_by_is_greedy(temperature):
    settings = SamplingSettings(temperature=temperature, top_p=1.0, seed=3)
    sample = DeviceSampler(settings)
    assert settings.greedy and sample.generator is None
    assert {sample(LOGITS) for _ in range(50)} == {1}


def test_a_small_but_real_temperature_still_samples():
    flat = torch.zeros(5)
    sample = DeviceSampler(SamplingSettings(temperature=0.01, top_p=1.0, seed=3))
    assert not sample.settings.greedy and len({sample(flat) for _ in range(200)}) > 1


# ----------------------------------------------------------------------------- the command line


def cli(*argv, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """`python -m runtime ARGV` in a child, optionally with its files limited to `limit_bytes` (a disk
    that fills: writes past the limit fail with EFBIG, as a full disk's fail with ENOSPC)."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.RLIM_INFINITY))
    return subprocess.run([sys.executable, "-m", "runtime", *map(str, argv)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, preexec_fn=limit if limit_bytes else None)


def one_error_line(child: subprocess.CompletedProcess) -> str:
    lines = child.stderr.strip().splitlines()
    assert child.returncode == 2 and "Traceback" not in child.stderr, child.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), child.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["generate", "score", "serve"])
@pytest.mark.parametrize("device", ["meta", "META", "meta:0", " meta"])
def test_commands_that_compute_refuse_the_meta_device(capsys, command, device):
    from runtime.cli import main

    extra = {"generate": ["--prompt", "hi"], "score": ["--token-ids", "1,2"], "serve": []}[command]
    with pytest.raises(SystemExit) as e:
        main([command, "--checkpoint", str(DEMO), *extra, "--device", device])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error: argument --device: meta holds no values"), err


@pytest.mark.slow
@pytest.mark.parametrize("limit", [4096, 200_000])  # in the config files, in the weights
def test_extract_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, limit):
    out = tmp_path / "small"
    line = one_error_line(cli("extract", "--checkpoint", DEMO, "--submodel", "0.5M", "--out", out, limit_bytes=limit))
    assert "nothing was written" in line and "too large" in line.lower()
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its temporary copy


# ----------------------------------------------------------------------------- the transplant


@pytest.fixture(scope="module")
def engine(checkpoints):
    return Engine.load(checkpoints["hybrid"], max_context=512)


def think_end_at(position: int, think_end: int, prompt_len: int):
    """A processor under which the model itself chooses `</think>` at `position` of its thought."""
    def process(context, logits):
        if len(context) - prompt_len == position:
            logits = torch.full_like(logits, float("-inf"))
            logits[..., think_end] = 0
        return logits
    return process


@pytest.mark.parametrize("think,answer", [("small", "full"), ("full", "small"), ("mid", "small")])
@pytest.mark.parametrize("position", [0, 1, 5])
def test_a_transplant_after_the_model_ends_its_own_thought_answers(engine, think, answer, position):
    prompt_len = len(engine.chat.prompt_ids(HI, True))
    request = ChatRequest(tuple(HI), think, answer, None, 24, SamplingSettings(temperature=0), transplant=True,
                          logits_processors=(think_end_at(position, engine.chat.special.think_end, prompt_len),))
    events = list(stream_chat(engine, request))
    done, switch = events[-1], next(e for e in events if isinstance(e, Switch))
    assert isinstance(done, Done) and done.error is None and done.answer_tokens > 0, done.error
    assert done.thinking_end == "model" and done.thinking_tokens == position + 1
    assert not switch.exact and switch.to_submodel == answer


class PanicLike(BaseException):
    """What pyo3 raises for a Rust panic (tokenizers, llguidance): a BaseException, not an Exception."""


def test_a_native_panic_mid_reply_ends_it_with_an_error_not_a_dead_thread(engine, monkeypatch):
    import runtime.generate

    def steps(*_a, **_k):
        yield from ()
        raise PanicLike("called `Option::unwrap()` on a `None` value")
    monkeypatch.setattr(runtime.generate, "sampled_steps", steps)
    done = list(stream_chat(engine, ChatRequest(tuple(HI), None, "full", 0, 8, SamplingSettings(temperature=0))))[-1]
    assert isinstance(done, Done) and done.finish_reason == "error"
    assert done.error == "Rust panic: called `Option::unwrap()` on a `None` value"
