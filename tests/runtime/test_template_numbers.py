"""The chat template sandbox bounds numbers, not only steps (issue 24): one operation on big integers is
a single C call that the time limit cannot interrupt, so every arithmetic operator checks its operands
and the size of its result before it computes, whichever way the big number was made."""

import pytest

from runtime.chat_template import MAX_CHARS, MAX_INT_BITS, compile_template, render
from runtime.errors import ElasticError, UsageError

# Ways a template can make a whole number far past MAX_INT_BITS without any arithmetic.
SOURCES = {
    "int filter, base 16": "{% set x = ('f' * 250000) | int(base=16) %}",
    "int.from_bytes": "{% set x = (0).from_bytes(('\\xff' * 125000).encode('latin-1'), 'big') %}",
    "a list of them": "{% set x = (['f' * 250000] | map('int', base=16) | list)[0] %}",
}
SMALL = "{% set y = ('f' * 200) | int(base=16) %}"  # 800 bits
OPERATIONS = ["x // y", "y // x", "x % y", "x % 7", "x * y", "x + y", "x - y", "x / y", "x ** 2", "x ** 0",
              "-x", "+x", "'%d' % x", "x * 'a'", "x * 1.5"]


def run(source: str) -> str:
    return render(compile_template(source), messages=[{"role": "user", "content": "hi"}])


def refused(source: str) -> str:
    with pytest.raises(ElasticError) as e:
        run(source)
    return str(e.value)


@pytest.mark.parametrize("source", SOURCES, ids=list(SOURCES))
@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_operator_refuses_a_big_operand_before_computing(source, operation):
    message = refused(SOURCES[source] + SMALL + "{{ (" + operation + ") == 1 }}")
    assert "bits" in message and f"(the limit is {MAX_INT_BITS:,})" in message, message


NS = "{% set ns = namespace(x=1) %}"
LOOP = "{% for i in range(10 ** 5) %}"


@pytest.mark.parametrize("template", [
    NS + "{% set ns.x = 2 ** 30000 %}" + LOOP + "{% set ns.x = ns.x * ns.x %}{% endfor %}",
    NS + "{% set ns.x = (2 ** 32000) * (2 ** 32000) %}" + LOOP + "{% set ns.x = ns.x + ns.x %}{% endfor %}",
    NS + "{% set ns.x = -(2 ** 32000) * (2 ** 32000) %}" + LOOP + "{% set ns.x = ns.x * 2 - 1 %}{% endfor %}",
    "{{ (2 ** 30000) * (2 ** 30000) * (2 ** 30000) }}",
    "{{ (3 ** 30000) ** 3 }}",
])
def test_a_number_that_grows_step_by_step_is_refused_at_the_step_past_the_limit(template):
    message = refused(template)
    assert "a number of" in message and "bits" in message, message


@pytest.mark.parametrize("template, says", [
    ("{{ range(10 ** 9) | length }}", "count"),
    ("{{ range(10 ** 7) | length }}", "failed"),  # jinja's own limit on ranges (100,000)
    ("{{ range(2 ** 70000) | length }}", "bits"),
    ("{{ 'x' * (10 ** 9) }}", "characters"),
    ("{{ [0] * (10 ** 8) }}", "characters"),
    ("{{ 'x'.center(2 ** 30000) }}", "about 2**"),  # a width's size, said without printing it
    ("{{ 'x'.ljust(10 ** 9) }}", "width"),
    ("{{ 'x' | center(10 ** 9) }}", "width"),
    ("{{ [1] | batch(10 ** 9, 'x') | list }}", "count"),
    ("{{ [1] | slice(10 ** 9) | list }}", "count"),
    ("{{ (5).to_bytes(10 ** 9, 'big') }}", "count"),
    ("{{ '%*d' % (10 ** 9, 5) }}", "width"),
    ("{{ '{:{}}'.format(1, 10 ** 9) }}", "wide"),
    ("{{ (2).__lshift__(10 ** 7) }}", "unsafe"),  # jinja has no shift operator; the method is the sandbox's
    ("{{ (2).__pow__(10 ** 7) }}", "unsafe"),
])
def test_other_ways_to_ask_for_a_huge_amount_are_refused(template, says):
    assert says in refused(template)


def test_a_decimal_string_past_pythons_digit_limit_makes_no_number():
    assert run("{{ ('9' * 5000) | int }}") == "0"  # the int filter's default: Python refuses to convert it


def test_ordinary_arithmetic_still_works():
    out = run("{{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ -3 + 1 }} {{ 6 / 4 }} {{ 1.5 * 2 }} "
              "{{ (2 ** 1000) // (2 ** 998) }} {{ 'ab' * 2 }} {{ '%d!' % 5 }} {{ loop_free if false else 1 - 1 }}")
    assert out == "3 1 1024 -2 1.5 3.0 4 abab 5! 0"


def test_a_refusal_is_a_usage_error_that_blames_neither_side_alone():
    """A limit may be hit by the template's own doing or by the conversation's (a huge message):
    the one line names both, and blames the checkpoint for neither alone."""
    with pytest.raises(UsageError, match="may be too large for the chat template, or the checkpoint's template "
                                         "is broken"):
        run(SOURCES["int filter, base 16"] + "{{ x // 3 }}")


# What a template does with a tool schema's numbers: prints, converts, compares, keeps them.
USES = ["{{ n }}", "{{ n | string }}", "{{ n | tojson }}", "{{ n | int }}", "{{ n | abs }}", "{{ '%d' % n }}",
        "{{ '%s' % (n,) }}", "{{ '{}'.format(n) }}", "{{ '{:>5}'.format(n) }}", "{{ namespace(x=n).x }}",
        "{{ n > 0 }}", "{{ [n] | max }}", "{{ n ~ '' }}", "{{ {'k': n} | tojson }}", "{{ n | round }}",
        "{{ (n | string) | length }}", "{{ dict(m=n).m }}", "{{ n | default(0) }}", "{{ n | float }}"]
BIG = [9007199254740991, -9007199254740991, 2 ** 63 - 1, -(2 ** 63), 10 ** 40, MAX_CHARS + 1, 1.7976931348623157e308]


@pytest.mark.parametrize("use", USES)
def test_a_requests_numbers_are_printed_not_refused(use):
    """Issue 39: zod's integer bounds (±9007199254740991, on every integer parameter the Vercel AI SDK
    sends) made every such request a 400 blaming the checkpoint. Only what a number makes the template
    build is bounded; a number printed or compared renders as Python prints it."""
    template = compile_template(use)
    for n in BIG:
        out = render(template, messages=[], n=n)
        assert out and "limit" not in out, (use, n, out)
    assert render(compile_template("{{ n | string }}"), messages=[], n=BIG[0]) == str(BIG[0])
