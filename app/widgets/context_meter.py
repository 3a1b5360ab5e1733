"""The context meter: how much of the context the next reply's prompt fills (what the model reads: the
template, the system prompt, the earlier turns with the reasoning the template keeps, the draft)."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QWidget

from runtime.api import CONTEXT_OVERFLOW

from .elided_label import ElidedLabel

OVER = {"keep_system": "the earliest turns will be left out (the system prompt stays)",
        "drop_oldest": "the earliest messages will be left out",
        "refuse": "sending will be refused, with what you can do"}


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
        self.label = ElidedLabel("", min_chars=8)  # never widens the input's row, whatever the font
        self.label.setObjectName("contextLabel")
        row.addWidget(self.bar, 1)
        row.addWidget(self.label, 3)
        self.tokens = self.limit = self.context = -1
        self.policy = CONTEXT_OVERFLOW.default

    def show_count(self, tokens: int, limit: int, context: int, why: str) -> None:
        self.tokens, self.limit, self.context = tokens, limit, context
        if tokens < 0:
            self.bar.setValue(0)
            self.label.setText(f"Context: not counted ({why})" if why else "Context: not counted")
            self.setToolTip("")
            return
        self.bar.setRange(0, max(1, context))
        self.bar.setValue(min(tokens, context))
        over = tokens > limit
        self.label.setText(f"Context {tokens:,} / {context:,} tokens" + (": too long" if over else ""))
        self.label.setProperty("over", over)
        self.label.style().unpolish(self.label)  # the theme styles an over-long chat by this property
        self.label.style().polish(self.label)
        tip = (f"The next reply's prompt is {tokens:,} tokens: the chat template, the system prompt, the earlier "
               f"turns (with the reasoning the template keeps) and your draft. The context holds {context:,}; "
               f"{context - limit:,} stay free for the reply, so a prompt may have {limit:,}.")
        if over:
            tip += f" This one is longer: {OVER.get(self.policy, OVER['refuse'])} (Settings → Defaults)."
        self.setToolTip(tip)

    def set_policy(self, policy: str) -> None:
        self.policy = policy
        if self.tokens >= 0:
            self.show_count(self.tokens, self.limit, self.context, "")
