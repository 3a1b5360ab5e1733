"""What the model sees of a chat, and what happens when a chat outgrows the context (no Qt).

A prompt must leave room for the reply (`reply_room`). When it does not, the overflow policy
(runtime/options.py CONTEXT_OVERFLOW) decides: leave out the oldest turns (keeping the system prompt,
or not) until it fits, or refuse. A turn is a user message with the replies after it; turns go whole,
so the prompt still starts with a question, and the newest turn (the question being answered) always
stays. When even that does not fit, the fit says so and the window offers a way out (app/controller.py).

The count is a function `messages -> tokens` (the engine's `ChatFormat.prompt_ids`, so what is counted
is the rendered template: system prompt, earlier turns, the reasoning the template keeps, tool text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

KEEP_SYSTEM, DROP_OLDEST, REFUSE = "keep_system", "drop_oldest", "refuse"


def reply_room(context: int, max_new_tokens: int) -> int:
    """Tokens a prompt must leave free for the reply: its whole limit, but at most a quarter of the
    context (a reply limit near the context length would otherwise leave no room for the chat)."""
    return max(1, min(max_new_tokens, context // 4))


@dataclass(frozen=True)
class Fit:
    messages: tuple[dict, ...]  # what is sent
    tokens: int  # the prompt of `messages`, in tokens
    dropped: int  # messages left out (0: the whole chat is sent)
    fits: bool  # False: even the newest turn (with the system prompt kept) leaves no room for the reply


def _units(messages: tuple[dict, ...], policy: str) -> tuple[list[list[int]], list[int], list[int]]:
    """(what may be left out, oldest first, each a list of message indices; the system messages kept;
    the newest turn's indices)."""
    system = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    last = users[-1] if users else len(messages) - 1
    newest = [i for i in range(last, len(messages)) if i not in system]
    turns, turn = [], []
    for i in range(len(messages)):
        if i in system or i >= last:
            continue
        if messages[i].get("role") == "user" and turn:
            turns.append(turn)
            turn = []
        turn.append(i)
    if turn:
        turns.append(turn)
    if policy == DROP_OLDEST:
        return ([system] if system else []) + turns, [], newest
    return turns, system, newest


def never_left_out(messages, policy: str) -> tuple[dict, ...]:
    """What `policy` keeps of `messages` however long the chat: the newest turn, and the system prompt unless
    the policy drops it too (under REFUSE nothing is left out). When even this is over the limit, leaving
    turns out cannot make the prompt fit (the context meter says "too long" before the send is refused)."""
    messages = tuple(messages)
    if policy == REFUSE:
        return messages
    _, kept, newest = _units(messages, policy)
    always = set(kept) | set(newest)
    return tuple(m for i, m in enumerate(messages) if i in always)


def fit_messages(messages, count: Callable[[list[dict]], int], limit: int, policy: str) -> Fit:
    """`messages` as sent under `policy`: whole when their prompt is at most `limit` tokens, else with
    the fewest oldest turns left out that bring it there (a binary search: each count renders the
    template once). Under REFUSE nothing is left out."""
    messages = tuple(messages)
    tokens = count(list(messages))
    if tokens <= limit:
        return Fit(messages, tokens, 0, True)
    if policy == REFUSE:
        return Fit(messages, tokens, 0, False)
    units, kept, newest = _units(messages, policy)

    def without(k: int) -> tuple[dict, ...]:
        gone = {i for unit in units[:k] for i in unit}
        return tuple(m for i, m in enumerate(messages) if i not in gone)

    low, high = 1, len(units)  # the answer is the smallest k in [low, high] that fits, if any
    best: tuple[int, int] | None = None  # (k, tokens)
    while low <= high:
        k = (low + high) // 2
        n = count(list(without(k)))
        if n <= limit:
            best, high = (k, n), k - 1
        else:
            low = k + 1
    if best is None:
        rest = tuple(messages[i] for i in sorted(set(kept) | set(newest)))
        return Fit(rest, count(list(rest)) if rest else 0, len(messages) - len(rest), False)
    kept_messages = without(best[0])
    return Fit(kept_messages, best[1], len(messages) - len(kept_messages), True)


def longest_context(folder, probe, resident: str, on_cpu: bool, placement: str | None = None) -> int:
    """The longest context the planner says fits with submodel `resident` of the checkpoint in `folder`
    resident, on the CPU's RAM or the GPU of `probe` (memory measured before the model loaded), rounded
    down to a whole 1,024 tokens; CONTEXT.low when not even that fits. With `placement` (routed experts
    in RAM), the GPU holds what that placement's plan puts there. Raises what the planner raises."""
    from pathlib import Path

    from runtime.api import CONTEXT, NO, cache_bytes, checkpoint_sizing, fit_submodel, plan_checkpoint

    cfg, subs, packing, _ = checkpoint_sizing(Path(folder))
    sub = next((s for s in subs if s.name == resident), subs[0])
    placed = plan_checkpoint(Path(folder), probe, CONTEXT.low, placement).proposed() if placement else None

    def fits(n: int) -> bool:
        if placed is not None:  # the weights on the GPU do not grow with the context; the cache does
            return placed.device_bytes + cache_bytes(cfg, sub, n, 2) + placed.workspace_bytes <= probe.gpu.free_bytes
        return fit_submodel(cfg, sub, packing, probe, n, on_cpu=on_cpu).verdict != NO

    low, high = CONTEXT.low, CONTEXT.high
    if fits(high):
        return high
    if not fits(low):
        return low
    while high - low > 1:  # fits(low) and not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return max(CONTEXT.low, low // 1024 * 1024 if low >= 1024 else low)
