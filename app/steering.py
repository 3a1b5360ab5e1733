"""Steering the thought of the reply shown while it thinks, and what steering can do now (the live phase).

The GUI never waits: each request sets a field of the reply's runtime Controls, which the decode loop
polls every token. A depth move sends the rest of the thought to the new level's thinker and budget,
"Answer now" ends the thought, "Think longer" adds budget. Once the reply answers, a depth move is for
the next reply only.

After "Think longer", the line under the depth slider says what this reply's budget now is
(`sig_budget_note`), until the reply ends, another chat is shown, or a depth move sets a new budget.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from .reply import Reply

THINK_LONGER_PART = 0.25  # "Think longer" adds this part of the model's thinking ceiling (depth.thinking_ceiling)


class Steering(QObject):
    sig_budget_note = Signal(str)  # "this reply: budget raised to N tokens", "" once it no longer holds

    def __init__(self, front):
        super().__init__(front)
        self.front = front  # app/controller.py ChatController
        self.live_phase = ""  # last sig_live_phase
        self.raised: tuple[int, int] | None = None  # (request id, budget) of the reply whose budget was raised

    def _steerable(self) -> Reply | None:
        """The reply shown, while it thinks and no end of its thought was asked for."""
        r = self.front.replies.reply_in(self.front.chats.current)
        return r if r is not None and r.begun and r.phase == "thinking" and not r.ending_thought else None

    def steer_depth(self, name: str) -> None:
        """The rest of the thought goes to level `name`'s thinker and budget (what was thought counts), and
        climbs from there if the level is Auto."""
        r, loaded = self._steerable(), self.front.loaded
        level = next((s for s in loaded.levels if s.name == name), None) if loaded else None
        if r is None or level is None or not level.available:
            return
        if name != ([r.level.name, *r.depth_moves][-1]):
            r.depth_moves.append(name)  # saved with the reply (depth_path): the export says what happened
        self._note(None)  # the new level's budget replaces the raised one
        if level.think is None:  # thinking off: answer now
            self.answer_now()
        else:
            r.controls.request_depth(level.think, level.budget, level.escalation)

    def answer_now(self) -> bool:
        """Ends the shown reply's thought at once (as a budget hit does); False when it is not thinking."""
        r = self._steerable()
        if r is None:
            return False
        r.controls.answer_now()
        r.ending_thought = True
        self.update_live_phase()
        return True

    @property
    def think_longer_tokens(self) -> int:
        ceiling = self.front.loaded.thinking_ceiling if self.front.loaded else 0
        return max(1, round(ceiling * THINK_LONGER_PART))

    def think_longer(self) -> int:
        """Gives the shown reply's thought more budget; returns how much (0 when it is not thinking)."""
        r = self._steerable()
        if r is None:
            return 0
        tokens = self.think_longer_tokens
        r.controls.think_longer(tokens)
        self._note_raised(r, tokens)
        return tokens

    def _note_raised(self, r: Reply, tokens: int) -> None:
        """The budget the runtime will give the thought, by its own rule (ThinkingBudget.longer: the more
        past the budget, or past what was thought when that is beyond it); a raise still on its way to the
        runtime counts."""
        p = r.progress
        budget = p.thinking_budget if p.elapsed_ms else r.level.budget  # the runtime's, once it has said
        if budget is None:  # unbounded: nothing to raise
            return
        if self.raised is not None and self.raised[0] == r.request_id:
            budget = max(budget, self.raised[1])
        self._note((r.request_id, max(budget, p.thinking_tokens) + tokens))

    def _note(self, raised: tuple[int, int] | None) -> None:
        if raised != self.raised:
            self.raised = raised
            self.sig_budget_note.emit(f"this reply: budget raised to {raised[1]:,} tokens" if raised else "")

    def update_live_phase(self) -> None:
        """Says (sig_live_phase) whether the reply shown waits for its turn, thinks, answers, or there is none."""
        r = self.front.replies.reply_in(self.front.chats.current)
        phase = ("" if r is None else "waiting" if not r.begun else "thinking" if self._steerable() is not None
                 else "answer")
        if self.raised is not None and (r is None or r.request_id != self.raised[0]):
            self._note(None)  # the raised reply ended, or another chat is shown
        if phase != self.live_phase:
            self.live_phase = phase
            self.front.sig_live_phase.emit(phase)
