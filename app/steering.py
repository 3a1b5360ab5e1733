"""Steering the thought of the reply shown while it thinks, and what steering can do now (the live phase).

The GUI never waits: each request sets a field of the reply's runtime Controls, which the decode loop
polls every token. A depth move sends the rest of the thought to the new level's thinker and budget,
"Answer now" ends the thought, "Think longer" adds budget. Once the reply answers, a depth move is for
the next reply only.
"""

from __future__ import annotations

from .reply import Reply

THINK_LONGER_PART = 0.25  # "Think longer" adds this part of the model's thinking ceiling (depth.thinking_ceiling)


class Steering:
    def __init__(self, front):
        self.front = front  # app/controller.py ChatController
        self.live_phase = ""  # last sig_live_phase

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
        r.controls.think_longer(self.think_longer_tokens)
        return self.think_longer_tokens

    def update_live_phase(self) -> None:
        """Says (sig_live_phase) whether the reply shown waits for its turn, thinks, answers, or there is none."""
        r = self.front.replies.reply_in(self.front.chats.current)
        phase = ("" if r is None else "waiting" if not r.begun else "thinking" if self._steerable() is not None
                 else "answer")
        if phase != self.live_phase:
            self.live_phase = phase
            self.front.sig_live_phase.emit(phase)
