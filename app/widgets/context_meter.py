"""The context meter: how much of the context the next reply's prompt fills (what the model reads: the
template, the system prompt, the earlier turns with the reasoning the template keeps, the draft).

A prompt longer than the context is said by what the overflow policy does with it: leaving the earliest
turns out is routine (a long chat), said in the meter's quiet colour; only a send that will be refused (by
the policy, or a message too long even alone) is "too long", in the warning colour on the label and the bar
alike (the theme styles `over`). A model on a
server is counted by its tokenizer route, or estimated from the characters: the meter says "estimated",
and its tooltip from what and why."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QWidget

from runtime.api import CONTEXT_OVERFLOW

from .elided_label import ElidedLabel

OVER = {"keep_system": "the earliest turns will be left out (the system prompt stays)",
        "drop_oldest": "the earliest messages will be left out",
        "refuse": "sending will be refused, with what you can do"}
SHORT = {"keep_system": "earliest turns left out", "drop_oldest": "earliest messages left out",
         "refuse": "too long"}  # the label's words after the count


def shorter_counts(text: str) -> list[str]:
    """The meter's shorter forms, longest first: "Context 58,432 / 8,192 tokens: too long" → "58,432 / 8,192:
    too long" → "too long"; the verdict is what a squeezed meter must still say (the count is in the tooltip).
    Without a verdict: "58,432 / 8,192" → "58,432"."""
    count, _, verdict = text.partition(": ")
    if not count.startswith("Context "):  # "Context: not counted (why)"
        return [*(["Context: not counted"] if verdict.startswith("not counted (") else []), "Context…"]
    bare = count.removeprefix("Context ").replace(" tokens", "")
    if not verdict:  # at least the prompt's count: no wider than "Context…" was (the row fits 1280 px at font 28)
        return [bare, bare.split(" / ")[0].removeprefix("about ")]
    return [f"{bare}: {verdict}", verdict, *(["left out"] if verdict.endswith("left out") else [])]


class ContextMeter(QWidget):
    """Dumb: shows what the controller's `sig_context` says (via `show_count`)."""

    def __init__(self):
        super().__init__()
        self.setObjectName("contextMeter")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(8)
        self.bar.setMaximumWidth(160)
        self.bar.setMinimumWidth(24)
        self.bar.setObjectName("contextBar")
        self.label = ElidedLabel("", shorter=shorter_counts)  # squeezed, the verdict stays whole (font 15 read "t…")
        self.label.setObjectName("contextLabel")
        row.addWidget(self.bar, 1)
        row.addWidget(self.label, 3)
        self.tokens = self.limit = self.context = -1
        self.why, self.alone_fits = "", True
        self.policy = CONTEXT_OVERFLOW.default

    def show_count(self, tokens: int, limit: int, context: int, why: str, alone_fits: bool = True) -> None:
        """`alone_fits`: what the policy never leaves out (the newest turn) fits `limit`; when it does not, a
        prompt over it is "too long" whatever the policy (leaving earlier turns out cannot make it fit)."""
        self.tokens, self.limit, self.context, self.why, self.alone_fits = tokens, limit, context, why, alone_fits
        if tokens < 0:
            self.bar.setValue(0)
            self.label.setText(f"Context: not counted ({why})" if why else "Context: not counted")
            self._mark("")
            self.setToolTip("")
            return
        self.bar.setRange(0, max(1, context))
        self.bar.setValue(min(tokens, context))
        over = tokens > limit
        policy = self.policy if self.policy in SHORT and alone_fits else "refuse"
        estimated = why.startswith("estimated")
        self.label.setText(f"Context {'about ' if estimated else ''}{tokens:,} / {context:,} tokens"
                           + (" (estimated)" if estimated else "") + (f": {SHORT[policy]}" if over else ""))
        self._mark(("refuse" if policy == "refuse" else "trim") if over else "")
        tip = (f"The next reply's prompt is {tokens:,} tokens: the chat template, the system prompt, the earlier "
               f"turns (with the reasoning the template keeps) and your draft. The context holds {context:,}; "
               f"{context - limit:,} stay free for the reply, so a prompt may have {limit:,}.")
        if over and not alone_fits:
            tip += (" This one is longer, and your message is too long even alone: leaving earlier turns out cannot "
                    f"make it fit, so {OVER['refuse']}.")
        elif over:
            tip += f" This one is longer: {OVER.get(self.policy, OVER['refuse'])} (Settings → Defaults)."
        if why:  # how it was counted, when not by the model's tokenizer (a model on a server)
            tip += f" The count is {why}." if estimated else f" Note: {why}."
        self.setToolTip(tip)

    def _mark(self, state: str) -> None:
        """"", "trim" or "refuse": the theme styles the label and the bar by this property."""
        for widget in (self.label, self.bar):
            widget.setProperty("over", state)
            widget.style().unpolish(widget)
            widget.style().polish(widget)

    def set_policy(self, policy: str) -> None:
        self.policy = policy
        if self.tokens >= 0:
            self.show_count(self.tokens, self.limit, self.context, self.why, self.alone_fits)
