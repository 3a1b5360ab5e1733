"""Every setting more than one consumer checks, declared once: its type, default, range and help.

The consumers derive from these and repeat nothing: the command line's flags and their checks
(cli.py `add_flag`, `check_values`), the server's request fields (server/openai_api.py), the
sampler's own check (sampling.py `SamplingSettings.check`), the app's settings file
(app/state/settings.py) and the Settings dialog's fields, ranges, steps and tooltips
(app/widgets/settings_dialog.py). A bad value gets one message everywhere, only the name is
spelled as the consumer spells it (`--top-p`, `top_p`, `sampling.top_p`):

    TOP_P.check(0)                      -> ValueError("a number above 0 and at most 1"): what it must be
    TOP_P.parse(0, "--top-p")           -> OptionError("--top-p is 0; it must be a number above 0 and at most 1")
    TOP_P.read(body, "top_p")           -> body["top_p"] checked, or the default when it is absent or null
    MAX_NEW_TOKENS.within(high=4096)    -> the same option, capped where a consumer knows more (the context)

Where a consumer's default differs from an option's on purpose, the difference is declared here too
(`ENGINE_CONTEXT`, `CLI_MAX_NEW_TOKENS`), with why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from .errors import show

MAX_TOKENS = 1 << 20  # the longest context any NemotronH checkpoint supports (1M tokens)


class OptionError(ValueError):
    """A value an option refuses; the message names it as the caller spelled it."""


def refusal(name: str, value, rule: str) -> str:
    """The one shape of a refused value: `top_p is 0; it must be a number above 0 and at most 1`."""
    return f"{name} is {show(value, 40)}; it must be {rule}"


@dataclass(frozen=True)
class Option:
    name: str  # the key in settings files and request bodies; the flag is --name-with-dashes
    kind: type  # int or float
    default: int | float | None  # None: unset (no seed, an unbounded thinking budget)
    low: int | float
    high: int | float
    help: str  # one line: the dialog's tooltip, the flag's help where it shows one
    low_open: bool = False  # `low` itself is refused
    high_open: bool = False  # `high` itself is refused
    step: float | None = None  # the dialog's arrow step (numbers with a fraction)
    special: str = ""  # the dialog's word for `low` (top-k 0: "off")

    @property
    def rule(self) -> str:
        """What a valid value is, in words: "a number above 0 and at most 1"."""
        if self.kind is int:
            return f"a whole number from {self.low:,} to {self.high:,}"
        if self.low_open:
            return f"a number above {self.low:g} and at most {self.high:g}"
        if self.high_open:
            return f"a number at least {self.low:g} and below {self.high:g}"
        return f"a number from {self.low:g} to {self.high:g}"

    def check(self, value) -> int | float:
        """`value` as this option's type; ValueError(rule) when it is not one. A whole
        number written with a fraction (40.0: JSON has one kind of number) counts as whole."""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and isinstance(value, float) and not math.isfinite(value):
            raise ValueError("a finite " + self.rule.removeprefix("a "))  # "a finite number from 0 to 2"
        if number and self.kind is int and isinstance(value, float):
            number = value.is_integer()
        if not number or not self.low <= value <= self.high or (self.low_open and value == self.low) \
                or (self.high_open and value == self.high):
            raise ValueError(self.rule)
        return self.kind(value)

    def parse(self, value, name: str | None = None) -> int | float:
        """`check`, with the refusal naming the value as `name` (default: the option's name)."""
        try:
            return self.check(value)
        except ValueError as e:
            raise OptionError(refusal(name or self.name, value, str(e))) from None

    def read(self, source: dict, name: str | None = None, key: str | None = None):
        """`source[key]` (default: the option's name) checked, or the default when absent or null."""
        value = source.get(key or self.name)
        return self.default if value is None else self.parse(value, name)

    def within(self, **changes) -> Option:
        """This option with a consumer's narrower range (or another default), e.g. capped at the context."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Choice:
    """A setting that is one of a few words (the app's overflow policy): each with what it means, in
    words the dialog shows."""
    name: str
    default: str
    values: tuple[tuple[str, str], ...]  # (the value, what it does in the user's words), the dialog's order
    help: str

    @property
    def rule(self) -> str:
        return "one of " + ", ".join(v for v, _ in self.values)

    def check(self, value) -> str:
        """`value` when it is one of the values; ValueError(rule) otherwise."""
        if not isinstance(value, str) or value not in dict(self.values):
            raise ValueError(self.rule)
        return value


# ---------------------------------------------------------------------- sampling (sampling.py's order)

TEMPERATURE = Option("temperature", float, 0.6, 0.0, 2.0,  # 0.6: the model card's advice, not OpenAI's 1.0
                     "how varied the reply is: 0 always takes the likeliest token", step=0.05)
TOP_P = Option("top_p", float, 0.95, 0.0, 1.0,
               "nucleus sampling: only the likeliest tokens that together have this probability",
               low_open=True, step=0.05)
TOP_K = Option("top_k", int, 0, 0, 1 << 24, "only the k likeliest tokens (0: off)", special="off")
MIN_P = Option("min_p", float, 0.0, 0.0, 1.0, "leave out tokens less likely than this part of the likeliest one",
               high_open=True, step=0.01)
SEED = Option("seed", int, None, 0, (1 << 64) - 1,  # a torch generator's seed is 64 bits
              "the same seed repeats a reply exactly (default: a new one each time)")
SAMPLING = (TEMPERATURE, TOP_P, TOP_K, MIN_P)  # the app's settings and dialog (a seed is per request)

# ---------------------------------------------------------------------- lengths

MAX_NEW_TOKENS = Option("max_new_tokens", int, 1024, 1, MAX_TOKENS, "the longest reply in tokens, thinking included")
CONTEXT = Option("context", int, 8192, 16, MAX_TOKENS,
                 "context length in tokens: the longest conversation, and what the planner plans memory for")
THINKING_BUDGET = Option("thinking_budget", int, None, 0, MAX_TOKENS,
                         "thinking tokens (0: thinking off; default: unbounded)")
# What the app does with a chat that outgrows the context (app/context_fit.py applies it).
CONTEXT_OVERFLOW = Choice("context_overflow", "keep_system", (
    ("keep_system", "keep the system prompt and the latest turns; leave out the oldest turns"),
    ("drop_oldest", "leave out the oldest messages, the system prompt first (a rolling window)"),
    ("refuse", "send nothing, and offer what to do")),
    "what happens when a chat no longer fits the context length")
# `generate`, `serve` and Engine.load allocate a cache this long when not told: a small one loads
# fast for a one-off command (the app and the planner use CONTEXT.default). A contract of the CLI.
ENGINE_CONTEXT = 4096
CLI_MAX_NEW_TOKENS = 512  # `generate`'s default, a contract of the CLI (a chat reply gets MAX_NEW_TOKENS)

# ---------------------------------------------------------------------- the server and the CLI's other numbers

PORT = Option("port", int, 8000, 0, 65535, "default 8000 (0: any free port)")
MAX_QUEUE = Option("max_queue", int, 8, 1, 1024, "requests that may wait for the model (more get 429)")
# What one client may hold (server/connections.py): a request arrives whole in seconds, an idle
# connection closes, and connections are counted (each holds a file descriptor).
REQUEST_TIMEOUT = Option("request_timeout", float, 10.0, 0.1, 3600.0,
                         "seconds a client has to send a whole request, headers and body (else 408)")
KEEP_ALIVE_TIMEOUT = Option("keep_alive_timeout", float, 5.0, 0.1, 3600.0,
                            "seconds an idle connection stays open between requests")
MAX_CONNECTIONS = Option("max_connections", int, 64, 1, 4096, "connections open at once (one more gets 503)")
SERVER_LIMITS = (REQUEST_TIMEOUT, KEEP_ALIVE_TIMEOUT, MAX_CONNECTIONS)
STALL_SECONDS = Option("stall_seconds", float, 30.0, 0.1, 3600.0, "seconds without data before a download retries")
STEPS = Option("steps", int, 4, 1, 4096, "decode steps to run")

# ---------------------------------------------------------------------- kernel-check's shapes (runtime/kernel_check.py)

ROWS = Option("rows", int, None, 1, 1 << 20, "output rows N of one packed weight (default: the real 30B-A3B shapes)")
COLS = Option("cols", int, None, 16, 1 << 20, "input columns K, a multiple of 16 (NVFP4's scale blocks)")
EXPERTS = Option("experts", int, None, 1, 4096, "E: check the gathered-experts call over E stacked weights")
ACTIVE = Option("active", int, 6, 1, 4096, "k experts chosen per token (with --experts)")
TOKENS = Option("tokens", int, 1, 1, 4096, "T: rows of activations (1 is a decode step)")
THREADS = Option("threads", int, None, 1, 1024, "CPU threads (default: torch's count)")
KERNEL_SHAPE = (ROWS, COLS, EXPERTS, ACTIVE, TOKENS, THREADS)

# ---------------------------------------------------------------------- tools (runtime/tool_loop.py, runtime/mcp/)

MAX_TOOL_CALLS = Option("max_tool_calls", int, 8, 1, 64, "the most tool calls one reply may make")
TOOL_TIMEOUT = Option("tool_timeout", float, 60.0, 1.0, 3600.0, "seconds a tool may take before its call fails",
                      step=5.0)

@dataclass(frozen=True)
class NameList:
    """A list of names the user adds (the server's extra Host names, the web pages it lets in): a
    repeatable flag (`--allow-host A --allow-host B`), a list in the settings file, a comma-separated
    field in the dialog. Each entry is checked and spelled one way by `entry`."""
    name: str  # the key in settings files
    flag: str  # one name per use, repeatable
    entry: Callable[[str], str]  # the entry as kept, or ValueError(what a valid one is)
    help: str
    metavar: str
    max_items: int = 64

    def check(self, values) -> tuple[str, ...]:
        """`values` (a list or tuple; None: empty) checked and spelled as kept, duplicates dropped;
        ValueError(what it must be) for a bad entry or a list that is not one."""
        kept, bad = self._entries(values)
        if bad is not None:
            raise ValueError(self.rule if bad[1] == self.rule else
                             f"a list of entries, each {bad[1]} ({show(bad[0], 40)} is not)")
        return kept

    def parse(self, values, name: str | None = None) -> tuple[str, ...]:
        """`check`, refusing the bad entry itself as `name` (default: the flag) in the house shape."""
        kept, bad = self._entries(values)
        if bad is not None:
            raise OptionError(refusal(name or self.flag, *bad))
        return kept

    @property
    def rule(self) -> str:
        return f"a list of at most {self.max_items} entries"

    def _entries(self, values) -> tuple[tuple[str, ...], tuple | None]:
        if values is None:
            return (), None
        if not isinstance(values, (list, tuple)) or len(values) > self.max_items:
            return (), (values, self.rule)
        out = []
        for value in values:
            try:
                out.append(self.entry(value))
            except ValueError as e:
                return (), (value, str(e))
        return tuple(dict.fromkeys(out)), None

    def split(self, text: str) -> list[str]:
        """The dialog's text (entries separated by commas or spaces) as a list."""
        return [part for part in text.replace(",", " ").split() if part]


def _web_rule(name: str):
    def entry(value):  # the server's own rule (server/web_rules.py has no web library in it)
        from .server import web_rules  # runtime/server imports this module

        return getattr(web_rules, name)(value)
    return entry


ALLOW_HOSTS = NameList("allow_hosts", "--allow-host", _web_rule("host_entry"),
                       "another name the server answers to, besides localhost, 127.0.0.1, [::1] and its address",
                       "NAME")
ALLOW_ORIGINS = NameList("allow_origins", "--allow-origin", _web_rule("origin_entry"),
                         "a web page's origin (such as http://localhost:3000) that may call the server; * for any",
                         "ORIGIN")
NAME_LISTS = {o.name: o for o in (ALLOW_HOSTS, ALLOW_ORIGINS)}

OPTIONS = {o.name: o for o in (*SAMPLING, SEED, MAX_NEW_TOKENS, CONTEXT, THINKING_BUDGET, PORT, MAX_QUEUE,
                               *SERVER_LIMITS, STALL_SECONDS, STEPS, MAX_TOOL_CALLS, TOOL_TIMEOUT, *KERNEL_SHAPE)}
FLAG_ALIASES = {"max_context": "context"}  # `--max-context` of generate and serve is the context


def add_list_flag(parser, option: NameList) -> None:
    """Adds `option` to an argparse parser as a repeatable flag (its values checked by `option.parse`)."""
    parser.add_argument(option.flag, action="append", default=[], metavar=option.metavar, help=option.help)


def for_flag(dest: str) -> Option | None:
    """The option behind a command-line flag, by its argparse dest (None: not a registered number)."""
    return OPTIONS.get(FLAG_ALIASES.get(dest, dest))


_OPTION_DEFAULT = object()


def add_flag(parser, option: Option, flag: str | None = None, default=_OPTION_DEFAULT, help: bool | str = False):
    """Adds `option` to an argparse parser as `--name` (or `flag`), typed and defaulting as the option
    says (or `default`). The flag shows the option's help when `help` is True, `help` itself when it
    is text, and none when False: each flag's --help stays as it has always been."""
    parser.add_argument(flag or "--" + option.name.replace("_", "-"), type=option.kind,
                        default=option.default if default is _OPTION_DEFAULT else default,
                        help=option.help if help is True else help or None)
