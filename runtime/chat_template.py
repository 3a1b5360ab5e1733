"""Rendering a checkpoint's chat template in a sandbox with bounded memory and time.

A chat template is Jinja code that comes with the checkpoint, so it is hostile until proven
otherwise. Jinja's `ImmutableSandboxedEnvironment` already keeps it from reaching Python
internals or changing data; this module adds the bounds the sandbox lacks:

* size: no operator, call or filter may build a string or list longer than MAX_CHARS, and the
  check happens *before* the work (`'x' * 3*10**9` is refused without allocating anything);
* numbers: every arithmetic operator (`+ - * / // % **`, unary minus) takes whole numbers of at most
  MAX_INT_BITS bits and may not make a larger one, checked before it computes. One operation on
  big integers is a single C call that no trace function interrupts: a floor division of two
  million-bit numbers (made by `'f' * 500000 | int(base=16)`, a hex literal or `int.from_bytes`)
  ran for tens of seconds between two steps of the time limit. The calls and filters that build as
  much as a whole-number argument says (a width, a count: SIZED_CALLS) refuse one above MAX_CHARS;
  elsewhere a number is only printed (bounded by Python's digit limit) or compared, so a request's
  `maximum: 9007199254740991` renders as it is;
* work: a trace function sees every line the compiled template runs and stops it once its thread
  has spent MAX_CPU_SECONDS of CPU time (time.thread_time: the work itself, so a PC busy with
  other programs slows an honest template down but never has it refused, as a wall-clock limit
  did); the same hook stops it when the process grew by more than MAX_GROWTH bytes (a string
  doubled in a loop);
* output: rendering stops once the text passes MAX_CHARS.

The context matches what transformers gives templates (messages, add_generation_prompt, the
special token strings, raise_exception, strftime_now, tojson, loop controls, {% generation %}).
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.ext import Extension
from jinja2.nodes import EvalContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from .errors import CheckpointError, UsageError
from .units import format_bytes

MAX_CHARS = 1 << 24  # 16.7M characters: far more than any context window holds
MAX_INT_BITS = 1 << 16  # about 19,700 digits; one operation on two such numbers takes milliseconds
MAX_CPU_SECONDS = 3.0  # of this thread's CPU time; the demo's template compiles in about 0.1 s of it
LOOK_EVERY, LOOK_SECONDS = 256, 0.002  # the guard reads the clocks every 256 trace events or 2 ms
LOOK_AT_LEAST = 16  # trace events between two looks, however fast the clock runs
MAX_GROWTH = 512 << 20  # bytes the process may grow while one template runs
MAX_TEMPLATE = 1 << 20  # characters of template source


class TemplateLimit(Exception):
    """The template went past one of the bounds above."""


def _too_big(size: int, what: str = "a value of {:,} characters", limit: int = MAX_CHARS):
    # a size past Python's digit limit cannot be printed in digits (and is not worth the time)
    shown = what.format(size) if size.bit_length() <= 64 else what.replace("{:,}", f"about 2**{size.bit_length() - 1}")
    raise TemplateLimit(f"the chat template tried to build {shown} (the limit is {limit:,})")


def deep_size(value, limit: int = MAX_CHARS) -> int:
    """What printing `value` costs, roughly: characters of every string plus one per item, nested
    containers counted every time they are referenced (as str() and JSON would). Stops counting
    once past `limit`, so it costs at most `limit` steps."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (str, bytes)):
            total += len(v)
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 1 + len(v)
            if total <= limit:
                stack.extend(v)
        elif isinstance(v, dict):
            total += 1 + 2 * len(v)
            if total <= limit:
                stack.extend(v.keys())
                stack.extend(v.values())
        elif isinstance(v, Namespace):
            stack.append(v._Namespace__attrs)  # printing a namespace prints its attributes
        else:
            total += 1
        if total > limit:
            return total
    return total


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(value) -> None:
    """An operand of arithmetic: a whole number of at most MAX_INT_BITS bits (or not a whole number)."""
    if _whole(value) and value.bit_length() > MAX_INT_BITS:
        raise TemplateLimit(f"the chat template tried arithmetic on a number of {value.bit_length():,} bits "
                            f"(the limit is {MAX_INT_BITS:,})")


def _check_size(value):
    size = deep_size(value)
    if size > MAX_CHARS:
        _too_big(size)
    return value


_NUMBER = re.compile(r"\d{8,}")
_NESTED_FIELD = re.compile(r"\{[^{}]*\{")


# The calls whose whole-number arguments say how much they build (a width, a count of items or
# slices, a length of bytes): such a number is bounded. Anywhere else a number is only printed or
# compared, and a tool schema's `maximum: 9007199254740991` (every integer the Vercel AI SDK sends)
# is as harmless as 7.
SIZED_CALLS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "to_bytes", "range", "safe_range",
                         "do_center", "do_batch", "do_slice", "do_indent", "do_wordwrap"})


def _check_args(args, kwargs, sized: bool = False):
    """Arguments are bounded before any call: their printed size, and, for a call that builds as
    much as a number says (`sized`), that number."""
    for a in (*args, *kwargs.values()):
        if sized and _whole(a) and abs(a) > MAX_CHARS:
            _too_big(abs(a), "a width or count of {:,}")
        _check_size(a)


def _check_format(fmt):
    """A format string (`%` or str.format or the format filter) may not ask for a huge width."""
    if isinstance(fmt, str):
        for number in _NUMBER.findall(fmt):
            if int(number) > MAX_CHARS:
                _too_big(int(number), "a field {:,} characters wide")


def _estimate(method: str, s, args, kwargs):
    """Output size of the str methods (and filters) that can multiply their input, before the call."""
    if not isinstance(s, str):
        return
    if method in ("replace", "do_replace") and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        old, new = str(args[0]), str(args[1])
        count = args[2] if len(args) > 2 and isinstance(args[2], int) else kwargs.get("count", -1)
        hits = s.count(old) if old else len(s) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        size = len(s) + hits * (len(new) - len(old))
    elif method == "expandtabs":
        size = len(s) * (args[0] if args and isinstance(args[0], int) else 8)
    elif method == "do_indent":
        width = args[0] if args else kwargs.get("width", 4)
        size = len(s) + (s.count("\n") + 1) * (len(width) if isinstance(width, str) else width)
    elif method == "do_wordwrap":
        wrap = args[3] if len(args) > 3 else kwargs.get("wrapstring") or "\n"
        size = len(s) * (1 + len(str(wrap)))
    else:
        return
    if size > MAX_CHARS:
        _too_big(size)


class _GenerationTag(Extension):
    """{% generation %}...{% endgeneration %} marks assistant text for training masks; here it renders as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    @staticmethod
    def _render(caller):
        return caller()


class _CheckedConcat(CodeGenerator):
    """`a ~ b` compiles to a join in C that jinja offers no hook for: route it through the sandbox."""

    def visit_Concat(self, node, frame):
        self.write("environment.checked_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox plus size checks on every operator, call, filter, concatenation
    and printed value."""

    intercepted_binops = frozenset(["*", "**", "+", "-", "/", "//", "%"])
    intercepted_unops = frozenset(["-", "+"])
    code_generator_class = _CheckedConcat

    def __init__(self):
        super().__init__(trim_blocks=True, lstrip_blocks=True, finalize=_check_size,
                         extensions=["jinja2.ext.loopcontrols", _GenerationTag])
        self.globals.pop("lipsum", None)  # lipsum(n=10**6) writes megabytes in one call
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = lambda fmt: datetime.now().strftime(str(fmt)[:100])
        self.filters["tojson"] = _tojson
        self.filters = {name: _bounded_filter(f) for name, f in self.filters.items()}

    @staticmethod
    def checked_concat(parts) -> str:
        size = sum(deep_size(p) for p in parts)
        if size > MAX_CHARS:
            _too_big(size)
        return "".join(map(str, parts))

    def call_unop(self, context, operator, arg):
        _check_int(arg)
        return super().call_unop(context, operator, arg)

    def call_binop(self, context, operator, left, right):
        _check_int(left)
        _check_int(right)
        if _whole(left) and _whole(right):
            bits = max(1, abs(left).bit_length()), max(1, abs(right).bit_length())
            result = {"*": sum(bits), "+": max(bits) + 1, "-": max(bits) + 1}.get(operator, 0)
            if result > MAX_INT_BITS:
                _too_big(result, "a number of {:,} bits", MAX_INT_BITS)
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) and n > 0:
                    if deep_size(seq) * n > MAX_CHARS:
                        _too_big(deep_size(seq) * n)
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and \
                    max(1, abs(left).bit_length()) * right > MAX_INT_BITS:
                _too_big(max(1, abs(left).bit_length()) * right, "a number of {:,} bits", MAX_INT_BITS)
        elif operator == "+":
            if deep_size(left) + deep_size(right) > MAX_CHARS:
                _too_big(deep_size(left) + deep_size(right))
        elif operator == "%" and isinstance(left, str):
            _check_format(left)  # ('%*d' % (width, x): a `*` takes its width from the arguments)
            _check_args(right if isinstance(right, tuple) else (right,), {}, sized="*" in left)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # jinja's own signature
        target = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format in its own function
        owner, name = getattr(target, "__self__", None), getattr(target, "__name__", "")
        _check_args(args, kwargs, sized=name in SIZED_CALLS)
        if isinstance(owner, str) and name in ("format", "format_map"):
            _check_format(owner)
            if _NESTED_FIELD.search(owner):  # '{:{}}'.format(x, '999999999'): the width is an argument
                for a in (*args, *kwargs.values()):
                    _check_format(str(a) if isinstance(a, (str, int)) else "")
        _estimate(name, owner, args, kwargs)
        return _check_size(super().call(__context, __obj, *args, **kwargs))


def _bounded_filter(f):
    def bounded(*args, **kwargs):
        # Filters may take the context or environment first; the value and its arguments follow.
        values = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.Environment, EvalContext))]
        _check_args(values, kwargs, sized=f.__name__ in SIZED_CALLS)
        if values:
            if f.__name__ == "do_format":
                _check_format(values[0])
            _estimate(f.__name__, values[0], values[1:], kwargs)
        return _check_size(f(*args, **kwargs))

    if hasattr(f, "jinja_pass_arg"):  # keep Jinja's marker of what the filter wants passed first
        bounded.jinja_pass_arg = f.jinja_pass_arg
    bounded.__name__ = f.__name__
    return bounded


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(str(message))


class _Guard:
    """Stops the code running in this thread once it has spent MAX_CPU_SECONDS of CPU time, or once
    the process grew by MAX_GROWTH bytes, from a trace function (it sees every line of the compiled
    template). It looks every LOOK_EVERY events and, so that one step allocating a lot (a value of
    MAX_CHARS in a loop) is seen soon, every LOOK_SECONDS in between (at least LOOK_AT_LEAST events
    apart); the memory, which costs more
    to read, only after LOOK_SECONDS more of CPU time. The wall clock paces the looking, it never
    refuses."""

    def __init__(self):
        import psutil

        self.process = psutil.Process()

    def __enter__(self):
        self.cpu0 = time.thread_time()
        self.rss0 = self.process.memory_info().rss
        self.steps, self.next_look, self.next_memory = LOOK_EVERY, time.monotonic() + LOOK_SECONDS, 0.0
        self.previous = sys.gettrace()
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc):
        sys.settrace(self.previous)
        return False

    def _trace(self, frame, event, arg):
        self.steps -= 1
        # The clock is read only LOOK_AT_LEAST events after a look: a clock that jumps (a busy PC) must not
        # make every event a look, which would cost more CPU time than the template itself.
        if self.steps <= 0 or (self.steps <= LOOK_EVERY - LOOK_AT_LEAST and time.monotonic() >= self.next_look):
            self._look()
        return self._trace

    def _look(self) -> None:
        self.steps, self.next_look = LOOK_EVERY, time.monotonic() + LOOK_SECONDS
        worked = time.thread_time() - self.cpu0
        if worked > MAX_CPU_SECONDS:
            raise TemplateLimit(f"the chat template worked for more than {MAX_CPU_SECONDS:g} s of CPU time")
        if worked >= self.next_memory:
            self.next_memory = worked + LOOK_SECONDS
            if self.process.memory_info().rss - self.rss0 > MAX_GROWTH:
                raise TemplateLimit(f"the chat template used more than {format_bytes(MAX_GROWTH)} of memory")


_ENV: BoundedSandbox | None = None


def compile_template(source: str, where: str = "the chat template") -> jinja2.Template:
    """Compiles a template from a checkpoint; any problem is a CheckpointError naming `where`."""
    global _ENV
    if not isinstance(source, str):
        raise CheckpointError(where, "the chat template is not text")
    if len(source) > MAX_TEMPLATE:
        raise CheckpointError(where, f"the chat template is {len(source):,} characters long; "
                                     f"at most {MAX_TEMPLATE:,} are accepted")
    if _ENV is None:
        _ENV = BoundedSandbox()
    try:
        with _Guard():
            return _ENV.from_string(source)
    except TemplateLimit as e:
        raise CheckpointError(where, f"the chat template cannot be used: {e}") from None
    except jinja2.TemplateSyntaxError as e:
        raise CheckpointError(where, f"the chat template has a syntax error on line {e.lineno}: {e.message}") from None
    except Exception as e:  # anything else from a hostile template is one line
        raise CheckpointError(where, f"the chat template cannot be compiled ({type(e).__name__}: {e})") from None


def render(template: jinja2.Template, **context) -> str:
    """Renders within the bounds above; any failure is one UsageError line."""
    parts, total = [], 0
    try:
        with _Guard():
            for chunk in template.generate(**context):
                total += len(chunk)
                if total > MAX_CHARS:
                    _too_big(total, "a prompt of {:,} characters")
                parts.append(chunk)
    except TemplateLimit as e:  # the template's own doing or the conversation's: this one line cannot tell
        raise UsageError(f"{e} while rendering this conversation: a value in it (a message, a tool's schema) "
                         "may be too large for the chat template, or the checkpoint's template is broken") from None
    except jinja2.TemplateError as e:
        raise UsageError(f"the chat template refused this conversation ({e})") from None
    except RecursionError:
        raise UsageError("the chat template recursed too deeply") from None
    except Exception as e:
        raise UsageError(f"the chat template failed on this conversation ({type(e).__name__}: {e})") from None
    return "".join(parts)
