"""The checkpoint's own tokenizer and chat template, and streaming detokenization.

Special token ids (`<think>`, `</think>`, end of turn) are looked up in the tokenizer,
never hard-coded. Messages are dicts with `role` and `content`; a past assistant message
may carry `reasoning_content`, which the template keeps or drops according to
`truncate_history_thinking`.

Nothing from the checkpoint runs as code: the tokenizer is always transformers' standard fast
tokenizer built from `tokenizer.json` (an `auto_map` naming the checkpoint's own Python class is
ignored, with one logged line), and the chat template runs in a bounded sandbox
(chat_template.py). Message text is encoded as plain text: a user who types `<|im_start|>` or
`</think>` gets those characters, never the special tokens, so only the template makes roles
and thinking boundaries. What counts is what the tokenizer itself would match, after its own
normalization: with an NFKC normalizer and `normalized: true` added tokens, a typed fullwidth
`＜|im_end|＞` is matched as the real token, and so are compatibility forms, accents a normalizer
strips, case a lowercase normalizer folds, whatever a Replace normalizer rewrites. So the tokenizer is
asked: message text is encoded once on its own, and every span it turns into an added token (its
offsets, in the text as typed) is encoded as characters, like a token's string typed as is.

The tokenizer is native code from a download (Rust, through tokenizers): every call into it goes
through runtime/native.py, so a panic (a backtracking regex that hits Oniguruma's retry limit) is
one error line, never an exception that escapes `except Exception`. Its work is bounded too, in
CPU time, never in wall-clock time (runtime/work_bound.py: a busy PC must not have an honest
tokenizer refused): at load a few short probe texts must encode within PROBE_CPU_SECONDS (else the
tokenizer is refused), and every encode runs in a helper thread (tokenizers releases the GIL while it
encodes) with a CPU budget that grows with the text; a tokenizer past its budget is marked broken
and used no more.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from .chat_template import compile_template, render
from .checkpoint.config import read_json
from .errors import CheckpointError, UsageError, show
from .native import describe, guarded
from .units import format_bytes
from .work_bound import STALL_SECONDS, wait_for_work

log = logging.getLogger(__name__)

THINK_START, THINK_END, TURN_START, TURN_END = "<think>", "</think>", "<|im_start|>", "<|im_end|>"
ROLES = ("system", "user", "assistant", "tool")
TEXT_FIELDS = ("content", "reasoning_content")
MAX_TOKENIZER_FILE = 256 << 20  # tokenizer.json of a 131k vocabulary is about 17 MB
# Private-use characters (plane 15) mark where message text held a special token's string, so the
# rendered prompt can be split there; text holding these characters is marked too.
MARK_OPEN, MARK_CLOSE, MARK_BASE = "\U000F0000", "\U000F0001", 0xF0100
MARK = re.compile("\U000F0000([\U000F0100-\U000FFFFD])\U000F0001")
TEMPLATE_STRING_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")
# Encoding work, in CPU seconds of the encoding thread: a short text gets ENCODE_CPU_SECONDS, a longer
# one a second more per ENCODE_CHARS_PER_CPU_S characters (the demo's tokenizer encodes about 470,000
# characters per CPU second on a busy 2-core PC; these only catch one that backtracks).
ENCODE_CPU_SECONDS, ENCODE_CHARS_PER_CPU_S = 2.0, 100_000
PROBE_CPU_SECONDS = 2.0  # for all of PROBE_TEXTS at load; each takes a sound tokenizer well under 1 ms
# Runs of one character class, then a different one: what makes a backtracking regex explode.
PROBE_TEXTS = tuple(c * 64 + end for c in ("a", "A", "1", " ", "\n", ".", "é", "日", "🙂", "a1", "a ")
                    for end in ("!", "a", "")) + ("Hello, world! What is 12 + 34? It is 46.\n",)
MAX_MARKS = 0xFFFD - 0x100  # private-use characters available as span markers
SPAN_CACHE, SPAN_CACHE_CHARS = 512, 1 << 20  # message texts whose protected spans are remembered
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "generation_config.json")


@dataclass(frozen=True)
class SpecialTokens:
    think_start: int | None
    think_end: int | None
    turn_start: int | None
    end_of_turn: frozenset[int]  # any of these ends the reply


def check_tokenizer_files(folder: Path) -> dict:
    """Validates the tokenizer files as data (types, sizes) before transformers reads them;
    returns tokenizer_config.json's object ({} when there is none). Loading calls this, and so
    does `check_checkpoint`, so a folder that verifies also loads."""
    folder = Path(folder)
    tok_file, cfg_file = folder / "tokenizer.json", folder / "tokenizer_config.json"
    for name in TOKENIZER_FILES:  # transformers opens these when present: a pipe would block it
        if (folder / name).exists() and not (folder / name).is_file():
            raise CheckpointError(folder / name, "is not a regular file")
    if not tok_file.is_file():
        raise CheckpointError(folder, "has no tokenizer (tokenizer.json): it cannot be used for chat")
    if tok_file.stat().st_size > MAX_TOKENIZER_FILE:
        raise CheckpointError(tok_file, f"is larger than {format_bytes(MAX_TOKENIZER_FILE)}; not a real tokenizer")
    config = read_json(cfg_file) if cfg_file.exists() else {}
    for key in TEMPLATE_STRING_KEYS:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None and not isinstance(value, str):
            raise CheckpointError(cfg_file, f"{key} must be a token string or null")
    template = config.get("chat_template")
    if isinstance(template, list):
        if not all(isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)
                   for t in template):
            raise CheckpointError(cfg_file, "chat_template must be a string or a list of {name, template} objects")
    elif template is not None and not isinstance(template, str):
        raise CheckpointError(cfg_file, "chat_template must be a string or a list of {name, template} objects")
    decoder = config.get("added_tokens_decoder")
    if decoder is not None and (not isinstance(decoder, dict) or not all(
            k.isdigit() and isinstance(v, dict) and isinstance(v.get("content"), str) for k, v in decoder.items())):
        raise CheckpointError(cfg_file, "added_tokens_decoder must map token ids to {content: ...} objects")
    extra = config.get("extra_special_tokens", config.get("additional_special_tokens"))
    if extra is not None and not isinstance(extra, (list, dict)):
        raise CheckpointError(cfg_file, "extra_special_tokens must be a list or an object")
    length = config.get("model_max_length")
    if length is not None and (not isinstance(length, (int, float)) or isinstance(length, bool)):
        raise CheckpointError(cfg_file, "model_max_length must be a number")
    for name in ("chat_template.jinja", "chat_template.json"):
        path = folder / name
        if path.exists() and path.stat().st_size > 1 << 20:
            raise CheckpointError(path, f"is larger than {format_bytes(1 << 20)}; not a real chat template")
    return config


def template_text(folder: Path, config: dict) -> tuple[str | None, Path]:
    """The chat template as transformers picks it (chat_template.jinja first, else
    tokenizer_config.json's, the "default" one of a list) and the file it came from."""
    folder = Path(folder)
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        try:
            return jinja.read_text(encoding="utf-8"), jinja
        except (OSError, UnicodeDecodeError):
            raise CheckpointError(jinja, "cannot be read as UTF-8 text") from None
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t["name"]: t["template"] for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    return (template if isinstance(template, str) and template.strip() else None), folder / "tokenizer_config.json"


class ChatFormat:
    """Turns a conversation into prompt token ids and token ids back into text."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        config = check_tokenizer_files(folder)
        for source, data in (("tokenizer_config.json", config), ("config.json", _maybe_json(folder / "config.json"))):
            if isinstance(data, dict) and data.get("auto_map"):
                log.warning("%s: ignoring auto_map in %s; Elastic Chat never runs code from a checkpoint and "
                            "uses the standard tokenizer from tokenizer.json", folder, source)
        # A local folder with local_files_only never touches the network; no global offline switch
        # (that would also switch off the model downloads in the same process). The class is named,
        # not looked up from the folder, and trust_remote_code is off: nothing asks, nothing runs.
        from transformers import PreTrainedTokenizerFast  # slow import, only when chatting
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        self.broken = ""  # set when the tokenizer ran past its budget: it is used no more
        with guarded(lambda why: CheckpointError(folder, f"the tokenizer files cannot be loaded ({why})")):
            self.tokenizer = PreTrainedTokenizerFast.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=False)
        tok = self.tokenizer
        try:
            self._bounded(lambda: [tok.encode(t, add_special_tokens=False) for t in PROBE_TEXTS], "encode",
                          sum(map(len, PROBE_TEXTS)), cpu_seconds=PROBE_CPU_SECONDS)
        except UsageError as e:
            raise CheckpointError(folder, f"the tokenizer fails on ordinary short texts: {e}") from None
        source, where = template_text(folder, config)
        self.template = compile_template(source, str(where)) if source else None
        self.has_template = self.template is not None
        self.template_strings = {k: v for k in TEMPLATE_STRING_KEYS if isinstance(v := getattr(tok, k, None), str)}
        # Every added token (special or not) is matched before the vocabulary, so each one's text
        # must be neutralised in message content; longest first so a longer token wins.
        added = {t.content if hasattr(t, "content") else str(t): i for i, t in tok.added_tokens_decoder.items()}
        self.added_ids = frozenset(added.values())
        protected = sorted((p for p in added if p), key=len, reverse=True) + [MARK_OPEN, MARK_CLOSE]
        if len(protected) > MAX_MARKS:
            raise CheckpointError(folder, f"the tokenizer adds {len(added):,} tokens; too many to handle")
        self._protect_re = re.compile("|".join(re.escape(p) for p in protected))
        self._plain_cache: dict[str, list[int]] = {}
        self._span_cache: dict[str, list[tuple[int, int]]] = {}
        end = {self._token_id(TURN_END)} | set(_eos_ids(folder, tok))
        self.special = SpecialTokens(self._token_id(THINK_START), self._token_id(THINK_END),
                                     self._token_id(TURN_START), frozenset(i for i in end if i is not None))
        self.supports_thinking = self.has_template and None not in (self.special.think_start, self.special.think_end)

    def _token_id(self, token: str) -> int | None:
        """The id of a special token if the vocabulary has it as a single token."""
        ids = self.encode(token)
        return ids[0] if len(ids) == 1 else None

    # ------------------------------------------------------------------ the native calls, bounded

    def _bounded(self, call, what: str, size: int = 0, cpu_seconds: float | None = None):
        """`call()` (a tokenizer call) in a helper thread under a CPU budget; its failures, a Rust panic
        included, are one UsageError line. Past the budget the call is left to finish on its own and
        this tokenizer is marked broken (the thread may still be using it)."""
        if self.broken:
            raise UsageError(self.broken)
        limit = cpu_seconds if cpu_seconds is not None else ENCODE_CPU_SECONDS + size / ENCODE_CHARS_PER_CPU_S
        box: dict = {}

        def run():
            try:
                box["value"] = call()
            except BaseException as e:  # a panic is a BaseException; reported below
                box["error"] = e
        worker = threading.Thread(target=run, name="tokenizer", daemon=True)
        worker.start()
        why = wait_for_work(worker, limit)
        if why:
            spent = (f"took more than {limit:.3g} s of CPU time" if why == "cpu"
                     else f"did no work for {STALL_SECONDS:g} s without finishing")
            self.broken = (f"the tokenizer {spent} to {what} {size:,} characters: its rules "
                           "(tokenizer.json) are broken or hostile; choose another model")
            raise UsageError(self.broken)
        if "error" in box:
            raise UsageError(f"the tokenizer cannot {what} this text ({describe(box['error'])})")
        return box["value"]

    def _ids(self, text: str, plain: bool = False) -> list[int]:
        """Ids of `text`; with `plain`, special tokens' strings are not matched (split_special_tokens)."""
        return list(self._bounded(lambda: self.tokenizer.encode(text, add_special_tokens=False,
                                                                split_special_tokens=plain), "encode", len(text)))

    def _spans_to_protect(self, text: str) -> list[tuple[int, int]]:
        """The spans of message text to encode as characters (see _Marks.protect), remembered for the
        last SPAN_CACHE texts: each turn of a chat protects every earlier message again."""
        if text in self._span_cache:
            return self._span_cache[text]
        found = [m.span() for m in self._protect_re.finditer(text)]
        if text:
            found += self._added_spans(text)
        spans = _merged(found)
        if len(text) <= SPAN_CACHE_CHARS:
            if len(self._span_cache) >= SPAN_CACHE:
                del self._span_cache[next(iter(self._span_cache))]  # the oldest
            self._span_cache[text] = spans
        return spans

    def _added_spans(self, text: str) -> list[tuple[int, int]]:
        """Where in `text` (as typed) the tokenizer, after its own normalization, matches an added token."""
        enc = self._bounded(lambda: self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True),
                            "encode", len(text))
        return [(a, b) for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"]) if i in self.added_ids and b > a]

    # ------------------------------------------------------------------ encoding

    def encode(self, text: str) -> list[int]:
        """Ids of text this program wrote itself: special token strings in it become special tokens
        (training writes replies ending in `</think>` and `<|im_end|>` this way). Never for user text."""
        return self._ids(text)

    def encode_plain(self, text: str) -> list[int]:
        """Ids of text from outside (a user, a file): a special token's string is encoded as characters."""
        _check_text(text, "text")
        marks = _Marks(self)
        return self._encode_marked(marks.protect(text), marks)

    def decode(self, ids: list[int]) -> str:
        with guarded(lambda why: UsageError(f"the tokenizer cannot decode this reply ({why})")):
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _encode_marked(self, text: str, marks: "_Marks") -> list[int]:
        """Encodes rendered text: the template's own text as is (its special tokens are real), each
        marked span as plain text."""
        ids, pos = [], 0
        for m in MARK.finditer(text):
            if m.start() > pos:
                ids += self._ids(text[pos:m.start()])
            ids += self._plain(marks.spans[ord(m.group(1)) - MARK_BASE])
            pos = m.end()
        if pos < len(text):
            ids += self._ids(text[pos:])
        return ids

    def _plain(self, text: str) -> list[int]:
        """Ids of `text` as ordinary characters, never an added token's id (halves are encoded
        separately when the tokenizer would still match a non-special added token)."""
        if text not in self._plain_cache:
            ids = self._ids(text, plain=True)
            if any(i in self.added_ids for i in ids):
                ids = self._plain(text[:len(text) // 2]) + self._plain(text[len(text) // 2:]) if len(text) > 1 \
                    else [i for i in ids if i not in self.added_ids]
            self._plain_cache[text] = ids
        return self._plain_cache[text]

    def prompt_ids(self, messages: list[dict], enable_thinking: bool, truncate_history_thinking: bool = True,
                   tools: list[dict] | None = None) -> list[int]:
        """Prompt for the next assistant turn. Without a chat template the messages' text is joined.

        `tools`: the functions offered (OpenAI-style `{"type": "function", "function": {name,
        description, parameters}}`), which the template renders into the system turn. An assistant
        message may carry `tool_calls` (`[{"function": {"name", "arguments"}}]`, arguments an object;
        a JSON string is parsed into one, since templates need an object) and a `tool` message a
        result; runtime/tool_calls.py formats and parses the calls.

        Only the template produces special tokens: message text (tool definitions and arguments
        included) reaches the template with every special token's string replaced by a marker, and
        each marker is encoded as plain text."""
        if not messages:
            raise UsageError("the conversation is empty")
        marks = _Marks(self)
        safe = [_checked_message(m, i, marks.protect) for i, m in enumerate(messages)]
        if self.template is None:
            return self._encode_marked("\n".join(m["content"] for m in safe), marks)
        extra = {"tools": _checked_tools(tools, marks.protect)} if tools else {}
        text = render(self.template, messages=safe, add_generation_prompt=True, enable_thinking=enable_thinking,
                      truncate_history_thinking=truncate_history_thinking, **extra, **self.template_strings)
        return self._encode_marked(text, marks)

    def stream_decoder(self) -> "StreamDecoder":
        return StreamDecoder(self.tokenizer)


class _Marks:
    """One prompt's protected spans: each span of message text that must be encoded as characters is
    replaced by a marker (a private-use character between two others) naming its entry in `spans`."""

    def __init__(self, chat: ChatFormat):
        self.chat, self.spans, self.index = chat, [], {}

    def protect(self, text: str) -> str:
        """`text` with every span the tokenizer would read as an added token (after its normalization),
        every added token's string as typed, and the marker characters themselves replaced by markers."""
        spans = self.chat._spans_to_protect(text)
        if not spans:
            return text
        out, pos = [], 0
        for start, end in spans:
            out += [text[pos:start], self._mark(text[start:end])]
            pos = end
        return "".join(out) + text[pos:]

    def _mark(self, span: str) -> str:
        if span not in self.index:
            if len(self.spans) >= MAX_MARKS:
                raise UsageError(f"the conversation holds more than {MAX_MARKS:,} different special-token "
                                 "strings; remove some")
            self.index[span] = len(self.spans)
            self.spans.append(span)
        return MARK_OPEN + chr(MARK_BASE + self.index[span]) + MARK_CLOSE


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with the overlapping ones joined."""
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def _check_text(text, what: str) -> None:
    if not isinstance(text, str):
        raise UsageError(f"the {what} must be text, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"the {what} is not valid UTF-8 text (it holds undecodable bytes); "
                         "save or paste it as UTF-8") from None


def _checked_message(message, index: int, protect) -> dict:
    """A copy of one message with its role checked and its text fields protected."""
    if not isinstance(message, dict):
        raise UsageError(f"message #{index + 1} is not a {{role, content}} object")
    role = message.get("role")
    if role not in ROLES:
        raise UsageError(f"message #{index + 1} has the role {show(role, 20)}; expected one of {', '.join(ROLES)}")
    out = {"role": role}
    for key in TEXT_FIELDS:
        value = message.get(key)
        if value is None and key != "content":
            continue
        _check_text(value, f"{role} message's {key.replace('_', ' ')}")
        out[key] = protect(value)
    calls = message.get("tool_calls")
    if calls and role == "assistant":
        listed = _as_list(calls, f"message #{index + 1}'s tool_calls")
        out["tool_calls"] = [_checked_call(c, index, protect) for c in listed]
    return out


def _as_list(value, what: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise UsageError(f"{what} must be a list")
    return list(value)


def _protected_data(value, protect, depth: int = 0):
    """A copy of JSON-like data with every string (keys too) protected."""
    if depth > 32:
        raise UsageError("tool data is nested too deeply")
    if isinstance(value, str):
        _check_text(value, "tool data")
        return protect(value)
    if isinstance(value, dict):
        return {protect(str(k)): _protected_data(v, protect, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_protected_data(v, protect, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise UsageError(f"tool data holds a {type(value).__name__}; only JSON values are allowed")


def _checked_call(call, index: int, protect) -> dict:
    """One assistant tool call as `{"type": "function", "function": {"name", "arguments": {...}}}`."""
    f = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"]:
        raise UsageError(f"message #{index + 1} has a tool call without a function name")
    arguments = f.get("arguments", {})
    if isinstance(arguments, str):  # OpenAI clients send a JSON string; templates need the object
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise UsageError(f"message #{index + 1}: the arguments of {show(f['name'], 40)} are not JSON") from None
    if not isinstance(arguments, dict):
        raise UsageError(f"message #{index + 1}: the arguments of {show(f['name'], 40)} must be an object")
    return {"type": "function", "function": {"name": _protected_data(f["name"], protect),
                                             "arguments": _protected_data(arguments, protect)}}


def _checked_tools(tools, protect) -> list[dict]:
    """The offered tools, each with a function name, every string protected."""
    out = []
    for i, tool in enumerate(_as_list(tools, "tools")):
        f = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"]:
            raise UsageError(f"tool #{i + 1} has no function name")
        out.append(_protected_data(tool, protect))
    return out


def _maybe_json(path: Path):
    try:
        return read_json(path) if path.exists() else None
    except CheckpointError:
        return None


def _eos_ids(folder: Path, tok) -> list[int]:
    ids = [tok.eos_token_id] if tok.eos_token_id is not None else []
    gen = folder / "generation_config.json"
    if gen.exists():
        try:
            eos = read_json(gen).get("eos_token_id")
        except CheckpointError as e:  # only a hint for where replies end: say so, carry on
            log.warning("%s; ignoring it", e)
            eos = None
        eos = eos if isinstance(eos, list) else [eos]
        ids += [i for i in eos if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(tok)]
    return ids


class StreamDecoder:
    """Incremental detokenizer: `push(id)` returns the new text, never half a UTF-8 character.

    Byte-level tokens can split a character; decoding the pending tokens and holding back
    a trailing U+FFFD until the character completes keeps every delta valid. Only a short
    window of tokens is re-decoded per step.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.start = 0  # tokens before `start` are fully emitted and no longer decoded
        self.emitted = ""  # text of ids[start:] already returned

    def _decode(self, ids: list[int]) -> str:
        with guarded(lambda why: UsageError(f"the tokenizer cannot decode this reply ({why})")):
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self._decode(self.ids[self.start:])
        if text.endswith("\ufffd"):
            return ""  # an incomplete character: wait for its remaining bytes
        delta = text[len(self.emitted):] if text.startswith(self.emitted) else text
        if len(self.ids) - self.start > 8:  # move the window on, keeping a little context for merges
            self.start = len(self.ids) - 1
            self.emitted = self._decode(self.ids[self.start:])
        else:
            self.emitted = text
        return delta

    def flush(self) -> str:
        """Whatever is still held back at the end (an incomplete character shows as U+FFFD)."""
        text = self._decode(self.ids[self.start:])
        return text[len(self.emitted):] if text.startswith(self.emitted) else ""
