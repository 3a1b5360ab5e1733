"""A chat too long for the context: the line that says so, and its two offers (leave out the earliest
turns, take the message back). The reply it refused is already gone (app/replies.py)."""

from __future__ import annotations

from .read_only import refuses_read_only

NOT_SENT = "too long for the context"  # what a refused message's header says, after "not sent: "


class Overflow:
    def __init__(self, front):
        self.front = front  # app/controller.py ChatController
        self.cid: int | None = None  # the chat whose last message did not fit (the offers act on it)

    def offer(self, cid: int, tokens: int, limit: int, context: int, trimmable: bool) -> None:
        """Chat `cid` of `tokens` does not fit `limit` of a context of `context`; `trimmable`: leaving
        out turns would do. The window offers what to do (sig_overflow)."""
        self.cid = cid
        ceiling = self.front.loaded.context_ceiling if self.front.loaded else 0
        longer = (f", or raise the context length in Settings (up to {ceiling:,} tokens fit this PC's memory)"
                  if ceiling > context else "")
        fits = f"the context of {context:,} holds at most {limit:,} with room for the reply"
        if trimmable:
            text = (f"Nothing was sent: this chat is {tokens:,} tokens, and {fits}. Leave out its earliest turns"
                    + (f", take your message back to shorten it{longer}." if longer else
                       " or take your message back to shorten it."))
        else:
            text = (f"Nothing was sent: your message is too long for the context even alone (with this chat it is "
                    f"{tokens:,} tokens; {fits}). Take it back to shorten it or attach less{longer}.")
        self.front.sig_overflow.emit(text, trimmable)

    def mark_not_sent(self, cid: int, refused_reply: int) -> None:
        """The refused question stays in the chat, shown as not sent and saved incomplete (no later reply
        reads it as a turn), until it is taken back or sent leaving the earliest turns out. (The refused
        reply's removal may still wait for the file, app/pending_saves.py: it is not the question.)"""
        last = [m for m in self.front.history.messages(cid) if m.id != refused_reply][-1:]
        if last and last[0].role == "user":
            m = last[0]
            self.front.saves.update_message(m.id, m.content, m.thinking, {**m.meta, "not_sent": NOT_SENT},
                                            complete=False)

    @refuses_read_only
    def send_leaving_out(self) -> bool:
        """Answers the refused chat's last question with its earliest turns left out."""
        from .context_fit import KEEP_SYSTEM

        front = self.front
        cid, self.cid = self.cid, None
        if cid is None or front.loaded is None or front.replies.reply_in(cid) is not None:
            return False
        front.saves.write_waiting()  # (the refused reply's removal first)
        last = front.history.messages(cid)[-1:]
        if last and last[0].role == "user" and "not_sent" in last[0].meta:  # sent now, as a turn
            m = last[0]
            front.history.update_message(m.id, m.content, m.thinking,
                                         {k: v for k, v in m.meta.items() if k != "not_sent"}, complete=True)
        front.chats.select(cid)
        front.replies.start(cid, [], overflow=KEEP_SYSTEM)
        return True

    @refuses_read_only
    def take_back(self) -> bool:
        """Removes the refused chat's last message; its text goes back to the box, its files with it."""
        front = self.front
        front.saves.write_waiting()  # (the refused reply's removal first)
        cid, self.cid = self.cid, None
        last = front.history.messages(cid)[-1:] if cid is not None else []
        if not last or last[0].role != "user":
            return False
        front.history.delete_message(cid, last[0].id)
        front.composer.take_back(cid, last[0])
        front.chats.select(cid)
        front.sig_take_back.emit(last[0].content)
        front.context.count()
        return True
