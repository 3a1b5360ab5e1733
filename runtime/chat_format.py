"""The checkpoint's own tokenizer and chat template, and streaming detokenization.

Special token ids (`<think>`, `</think>`, end of turn) are looked up in the tokenizer,
never hard-coded. Messages are dicts with `role` and `content`; a past assistant message
may carry `reasoning_content`, which the template keeps or drops according to
`truncate_history_thinking`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from .errors import CheckpointError, UsageError

THINK_START, THINK_END, TURN_START, TURN_END = "<think>", "</think>", "<|im_start|>", "<|im_end|>"


@dataclass(frozen=True)
class SpecialTokens:
    think_start: int | None
    think_end: int | None
    turn_start: int | None
    end_of_turn: frozenset[int]  # any of these ends the reply


class ChatFormat:
    """Turns a conversation into prompt token ids and token ids back into text."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        if not (folder / "tokenizer.json").exists() and not (folder / "tokenizer_config.json").exists():
            raise CheckpointError(folder, "has no tokenizer (tokenizer.json): it cannot be used for chat")
        # A local folder with local_files_only never touches the network; no global offline switch
        # (that would also switch off the model downloads in the same process).
        from transformers import AutoTokenizer  # noqa: PLC0415 (slow import, only when chatting)
        from transformers.utils import logging as hf_logging  # noqa: PLC0415

        hf_logging.set_verbosity_error()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except Exception as e:  # transformers raises many kinds; the message is what matters
            raise CheckpointError(folder, f"the tokenizer files cannot be loaded ({type(e).__name__}: {e})") from None
        tok = self.tokenizer
        self.has_template = bool(getattr(tok, "chat_template", None))
        end = {self._token_id(TURN_END)} | set(_eos_ids(folder, tok))
        self.special = SpecialTokens(self._token_id(THINK_START), self._token_id(THINK_END),
                                     self._token_id(TURN_START), frozenset(i for i in end if i is not None))
        self.supports_thinking = self.has_template and None not in (self.special.think_start, self.special.think_end)

    def _token_id(self, token: str) -> int | None:
        """The id of a special token if the vocabulary has it as a single token."""
        ids = self.tokenizer.encode(token, add_special_tokens=False)
        return ids[0] if len(ids) == 1 else None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def prompt_ids(self, messages: list[dict], enable_thinking: bool, truncate_history_thinking: bool = True) -> list[int]:
        """Prompt for the next assistant turn. Without a chat template the messages' text is joined."""
        if not messages:
            raise UsageError("the conversation is empty")
        if not self.has_template:
            return self.encode("\n".join(m["content"] for m in messages))
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True,
                enable_thinking=enable_thinking, truncate_history_thinking=truncate_history_thinking)
        except Exception as e:
            raise UsageError(f"the chat template failed on this conversation ({e})") from None
        return self.encode(text)

    def stream_decoder(self) -> "StreamDecoder":
        return StreamDecoder(self.tokenizer)


def _eos_ids(folder: Path, tok) -> list[int]:
    ids = [tok.eos_token_id] if tok.eos_token_id is not None else []
    gen = folder / "generation_config.json"
    if gen.exists():
        try:
            eos = json.loads(gen.read_text()).get("eos_token_id")
        except (OSError, json.JSONDecodeError):
            logging.getLogger(__name__).warning("%s is not valid JSON; ignoring it", gen)
            eos = None
        ids += eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else []
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

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids[self.start:], skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""  # an incomplete character: wait for its remaining bytes
        delta = text[len(self.emitted):] if text.startswith(self.emitted) else text
        if len(self.ids) - self.start > 8:  # move the window on, keeping a little context for merges
            self.start = len(self.ids) - 1
            self.emitted = self.tokenizer.decode(self.ids[self.start:], skip_special_tokens=True)
        else:
            self.emitted = text
        return delta

    def flush(self) -> str:
        """Whatever is still held back at the end (an incomplete character shows as U+FFFD)."""
        text = self.tokenizer.decode(self.ids[self.start:], skip_special_tokens=True)
        return text[len(self.emitted):] if text.startswith(self.emitted) else ""
