"""Messages sent while their chat's reply still streams: they wait here, in order, and each one is sent
when the reply before it ends (Enter during a reply never stops it silently; Esc or Stop does that, and
then the first message waiting goes at once).

The one owner of what waits. A message that cannot go when its turn comes (the chat was deleted, the
model unloaded, the chat no longer fits) is put back into its chat's message box, never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import QTimer

from .state.history import HistoryReadOnly


@dataclass
class Waiting:
    text: str
    files: list[dict] = field(default_factory=list)


class SendQueue:
    def __init__(self, front):
        self.front = front  # app/controller.py ChatController
        self.waiting: dict[int, list[Waiting]] = {}
        self.said: dict[int, str] = {}  # the line that says what waits in a chat, withdrawn once nothing does

    def count(self, cid: int | None) -> int:
        return len(self.waiting.get(cid, [])) if cid is not None else 0

    def add(self, cid: int, text: str, files: list[dict]) -> None:
        self.waiting.setdefault(cid, []).append(Waiting(text, files))
        n = self.count(cid)
        said = ("your message is sent when the reply streaming here ends" if n == 1 else
                f"{n} messages wait; the first goes when the reply streaming here ends, each next one after the "
                "reply before it")
        self.said[cid] = f"Queued: {said}. Esc stops that reply now."
        self.front.sig_notice.emit(self.said[cid])

    def reply_ended(self, cid: int) -> None:
        """The reply of chat `cid` ended (done, stopped, failed or refused): the next message waiting goes
        once the end is fully shown (after this turn of the event loop)."""
        if self.count(cid):
            QTimer.singleShot(0, lambda: self._send_next(cid))

    def _send_next(self, cid: int) -> None:
        front = self.front
        queue = self.waiting.get(cid)
        if not queue or front.replies.reply_in(cid) is not None:
            return  # sent already, or another reply runs here now: its end sends it
        if front.loaded is None:
            self.give_back(cid)
            return
        first = queue.pop(0)
        if not queue:
            del self.waiting[cid]
            self._withdraw(cid)  # it no longer holds: nothing waits here now (it stayed, as if it still did)
        try:
            front.chats.post(cid, first.text, first.files)
        except HistoryReadOnly as e:  # another program holds the file (or the disk is full): the box keeps it
            self.waiting.setdefault(cid, []).insert(0, first)
            self.give_back(cid, say=False)
            front.sig_error.emit(str(e), "")

    def _withdraw(self, cid: int) -> None:
        said = self.said.pop(cid, "")
        if said:
            self.front.sig_error_withdrawn.emit(said)  # only while the line still says it

    def give_back(self, cid: int, say: bool = True) -> None:
        """What waits in chat `cid` goes back into its message box (after what is written there)."""
        queue = self.waiting.pop(cid, [])
        self._withdraw(cid)
        if queue:
            composer = self.front.composer
            texts = [composer.draft(cid)] + [w.text for w in queue]
            composer.drafts[cid] = "\n\n".join(t for t in texts if t)
            if cid == self.front.chats.current:
                self.front.sig_take_back.emit(composer.drafts[cid])
            if say:
                self.front.sig_notice.emit("The queued message could not be sent: it is back in the message box.")
