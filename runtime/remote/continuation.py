"""Continue on a remote engine: a reply cut by its token limit goes on from where it stopped
(ChatRequest.continued). The chat API has no field for it, so the conversation goes with the cut
reply as its final assistant turn and the engine is asked, in the fields it reads (server_kind.py),
to go on with that turn rather than start a new one: vLLM's `continue_final_message` and llama.cpp's
prefilled final turn continue a cut answer; only llama.cpp goes on with a thought left open.

Where the engine is not known to do so (a plain OpenAI-compatible server, or an Elastic Chat server,
whose API takes no reply to continue yet), Continue is refused in one line: a server that ignored the
fields would start a new reply and the text would be doubled.
"""

from __future__ import annotations

from ..reply_record import Continuation
from .models import ELASTIC
from .server_kind import ServerKind

REGENERATE = "Regenerate with a larger Max reply tokens (Settings → Defaults) instead"
CANNOT_CONTINUE = ("a model on this server cannot continue a reply: its chat API is not known to go on from a final "
                   f"assistant message (llama.cpp's llama-server and vLLM are); {REGENERATE}")
ELASTIC_CANNOT = f"an Elastic Chat server takes no reply to continue over its API yet; {REGENERATE}"
CHARS_PER_TOKEN = 4  # a thought's length in tokens when its reply did not count them (an estimate)


def continue_refusal(kind: ServerKind, mode: str, cont: Continuation) -> str:
    """Why `cont` cannot be continued on this engine ("" when it can)."""
    if mode == ELASTIC:
        return ELASTIC_CANNOT
    if not kind.continues_answers:
        return CANNOT_CONTINUE
    if cont.thinks_on and kind.continue_thought is None:
        return (f"{kind.name} goes on with a cut answer but not with a thought cut mid-way (it closes the thought "
                f"it is given); {REGENERATE}")
    return ""


def cut_turn(thought: str, answer: str) -> dict:
    """The cut reply as the conversation's final assistant turn, for the engine to go on with."""
    turn = {"role": "assistant", "content": answer}
    if thought:
        turn["reasoning_content"] = thought
    return turn


def cut_thought_tokens(cont: Continuation) -> int:
    """The cut thought's tokens: as its reply counted them, else estimated from its length."""
    if cont.thinking_tokens is not None:
        return cont.thinking_tokens
    return -(-len(cont.thinking_text) // CHARS_PER_TOKEN)
