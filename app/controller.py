"""The chat controller: the app's state on the GUI thread, between the widgets and the engine worker.

It owns, and is the only owner of: the current chat, the reasoning depth, the message being edited,
the replies in flight (each tagged with its request id and bound to its own chat) and the loaded
model's description. Widgets only show what it emits and call its methods; it never holds a widget.

A reply belongs to its chat, not to the view: switching chats (or Ctrl+N) leaves it streaming into
its own stored message, and a view that shows that chat again picks it up live. Text and timings
come from the runtime's events only (the per-token deltas are joined once, here, to show and save
the reply so far; the final text and timings are the Done event's). The view gets the text on a
~30 Hz timer; SQLite gets it about once a second, so a crash loses at most a second.

The reply shown can be steered while it thinks (the runtime's thread-safe Controls, set here and
polled by the decode loop every token, so the GUI never waits): a depth change moves the rest of the
thought to the new level's thinker and budget, "Answer now" ends the thought, "Think longer" adds budget.
Once it answers, a depth change is for the next reply only. The depth stays the controller's either way.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QTimer, Signal, Slot

from runtime.depth import lower_level, usable_level

from .crash import LoadRecord
from .server_control import ServerControl
from .state.history import History, HistoryReadOnly, Message
from .state.settings import Settings
from .token_counter import TokenCounter
from .workers import EngineWorker, LoadedModel, start_in_thread, stop_thread

log = logging.getLogger(__name__)
FLUSH_MS, PERSIST_MS = 33, 1000
COUNT_MS = 250  # the meter counts a draft this long after the typing pauses
THINK_LONGER_PART = 0.25  # "Think longer" adds this part of the model's thinking ceiling (depth.thinking_ceiling)
INTERRUPTED = "interrupted"  # a reply the process died during (a crash, a kill, a power cut)


@dataclass
class Reply:
    """A reply in flight, as far as the runtime's events have come: their texts joined, the last event's
    totals (every event carries them), the switches. It counts and times nothing itself."""
    request_id: int
    conversation_id: int
    message_id: int
    controls: object  # runtime.controls.Controls
    level: object  # the runtime's DepthLevel used
    submodel: str  # the submodel working now (the Prefill event's, then each Token's)
    phase: str
    progress: object  # runtime.events.Progress: the last event's
    thinking: list[str] = field(default_factory=list)  # the Token texts, joined when shown or saved
    answer: list[str] = field(default_factory=list)
    switches: list = field(default_factory=list)  # runtime.events.Switch, in order
    rounds: list = field(default_factory=list)  # runtime.tool_loop.ToolRound.to_dict() of the rounds that called tools
    calls: list = field(default_factory=list)  # this round's calls: ToolResult dicts, or {..., "status": "asking"}
    ending_thought: bool = False  # "Answer now" (or the depth Off) was asked: no more steering
    dirty: bool = False
    stopping: bool = False
    removed: bool = False  # its message was deleted (the context refused it); SQLite may give its id to the next one
    prompt_tokens: int | None = None  # what the model read (the worker's fit, app/context_fit.py)
    dropped: int = 0  # earlier messages left out so the chat fits the context

    def meta(self) -> dict:
        """What is known so far; saved with the partial reply, so an interrupted one still says what it was.
        Counts, timings and switches are the events' own serialisations (runtime/events.py)."""
        answer_switch = next((s for s in self.switches if s.reason == "answer"), None)
        context = {"prompt_tokens": self.prompt_tokens} if self.prompt_tokens is not None else {}
        if self.dropped:
            context["context_dropped"] = self.dropped
        p = self.progress
        budget = p.thinking_budget if p.elapsed_ms else self.level.budget  # the runtime's, once it has said
        path = {"thinking_path": [list(run) for run in p.thinking_path]} if len(p.thinking_path) > 1 else {}
        return {**context, "depth": self.level.name, "think_submodel": self.level.think,
                "answer_submodel": self.level.answer,
                "thinking_budget": budget if self.level.think else 0, **p.to_dict(), **path,
                "switch": answer_switch.to_dict() if answer_switch else {},
                "switches": [s.to_dict() for s in self.switches],
                **({"tool_rounds": self.shown_rounds()} if self.rounds or self.calls else {})}

    def shown_rounds(self) -> list[dict]:
        """The rounds as shown: those done, then this one's calls so far (its texts are the live ones)."""
        live = [{"thinking": "", "answer": "", "calls": list(self.calls)}] if self.calls else []
        return [*self.rounds, *live]


def sampling_for(defaults, chat_settings: dict):
    """The one conversion: the settings' defaults, overridden by this chat's, as the runtime's dataclass."""
    from runtime.sampling import SamplingSettings

    values = {**vars(defaults), **(chat_settings.get("sampling") or {})}
    return SamplingSettings(float(values["temperature"]), float(values["top_p"]), int(values["top_k"]),
                            float(values["min_p"])).check()


def _refuses_read_only(method):
    """A write to a read-only history (a newer version's, an unwritable file) becomes the banner's one
    line, never the crash dialog; nothing else changes."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except HistoryReadOnly as e:
            self.sig_error.emit(str(e), "")
            return False
    return guarded


class ChatController(QObject):
    sig_model_loaded = Signal(object)  # LoadedModel
    sig_model_failed = Signal(str)
    sig_model_unloaded = Signal()
    sig_load_progress = Signal(object)  # runtime LoadProgress of the load in progress
    sig_load_cancelled = Signal()
    sig_conversations = Signal(object, object)  # list[Conversation], current id
    sig_chat_shown = Signal(int, object, object)  # conversation id, list[Message], id of its streaming message or None
    sig_messages_added = Signal(int, object, object)  # conversation id, list[Message], streaming message id or None
    sig_reply_started = Signal(int, int, str, str)  # conversation id, message id, submodel about to work, phase
    # conv id, message id, answer, thinking, submodel, thinking live, the last event's runtime.events.Progress
    sig_stream = Signal(int, int, str, str, str, bool, object)
    sig_token = Signal(str, str, float, float, float)  # submodel, phase, latency ms, TTFT ms, tokens/s so far
    sig_switch = Signal(str, str, int, float, str)  # from, to, re-prefilled tokens, ms, reason (Switch.reason)
    sig_reply_done = Signal(int, object)  # conversation id, the saved Message
    sig_done = Signal(object)  # the runtime's Done event (for the live strip)
    sig_error = Signal(str, str)  # message, a lower depth level to offer ("" when none)
    sig_busy = Signal(bool)  # a reply is in flight (in any chat)
    sig_deleted = Signal(int, str)  # conversation id, title (for the undo banner)
    sig_editing = Signal(str)  # the text of the message being edited; "" when the edit ended
    sig_depth = Signal(str)
    sig_notice = Signal(str)  # one line for the user that is not an error (why the depth changed)
    # the shown chat's reply: "thinking" (it can be steered), "answer" (a depth change is for the next reply), ""
    sig_live_phase = Signal(str)
    sig_tool_rounds = Signal(int, int, object)  # conv id, message id, the reply's tool rounds (list of dicts)
    sig_consent = Signal(int, object, object)  # request id, runtime.tool_loop.PendingCall, Mailbox: ask the user
    # the context meter: tokens the next reply's prompt holds (-1: not counted), the most that leaves the
    # reply its room, the context length, why it was not counted ("" when it was)
    sig_context = Signal(int, int, int, str)
    # a chat that does not fit the context: the line for the user, and whether leaving out turns would do
    sig_overflow = Signal(str, bool)
    sig_take_back = Signal(str)  # a message taken back from the chat: its text, for the message box
    # the files attached to the message being written in the chat shown: [(name, tokens or -1, note)]
    sig_attachments = Signal(object)
    # requests to the engine worker and the token counter (queued: each lives in its own thread)
    _sig_load = Signal(str, str, bool)
    _sig_unload = Signal()
    _sig_generate = Signal(int, object, object, str)
    _sig_count = Signal(int, object, bool, object)  # serial, messages, thinking, the tools offered (or None)
    _sig_count_model = Signal(str)
    _sig_count_text = Signal(int, str)

    def __init__(self, data_dir: Path, settings: Settings, settings_path: Path, probe_file: str | None = None):
        super().__init__()
        self.data_dir, self.settings, self.settings_path = Path(data_dir), settings, settings_path
        self.history = History(self.data_dir / "history.sqlite3")
        self.history.purge_deleted(older_than_s=24 * 3600)
        self.interrupted = self._mark_interrupted()
        self.current: int | None = None
        self.depth = settings.depth
        self._settings_problem = ""  # the last reason settings could not be saved (said once)
        self.editing: int | None = None
        self.editing_text = ""  # the edited message as the box holds it now (for the meter)
        self.loaded: LoadedModel | None = None
        self.replies: dict[int, Reply] = {}  # request id -> reply, oldest first
        self.live_phase = ""  # last sig_live_phase
        self._ids = itertools.count(1)
        self.load_record = LoadRecord(self.data_dir)  # a model that failed or crashed loading is not reloaded unasked
        self.worker = EngineWorker(settings.context, probe_file, self.load_record)
        self.thread = start_in_thread(self.worker, "engine")
        self.worker.sig_loaded.connect(self._on_loaded)
        self.worker.sig_load_failed.connect(self._on_load_failed)
        self.worker.sig_load_progress.connect(self.sig_load_progress)
        self.worker.sig_load_cancelled.connect(self.sig_load_cancelled)
        self.worker.sig_event.connect(self._on_event)
        from .tools_controller import ToolsController

        self.tools = ToolsController(self.data_dir, self)  # MCP servers, approvals, consent (docs/tools.md)
        self.tools.sig_consent.connect(self._consent_asked)
        self.tools.sig_servers.connect(self.count_context)  # the tools offered are part of the prompt
        QTimer.singleShot(0, self.tools.start_approved)  # once the window's loop runs
        self.worker.sig_reply_failed.connect(self._on_reply_failed)
        self.worker.sig_fitted.connect(self._on_fitted)
        self.worker.sig_overflow.connect(self._on_overflow)
        self._sig_load.connect(self.worker.load)
        self._sig_unload.connect(self.worker.unload)
        self._sig_generate.connect(self.worker.generate)
        # The context meter counts in a thread of its own, so typing never waits for a tokenizer.
        self.counter = TokenCounter()
        self.counter_thread = start_in_thread(self.counter, "tokens")
        self.counter.sig_counted.connect(self._on_counted)
        self._sig_count.connect(self.counter.count)
        self._sig_count_model.connect(self.counter.use)
        self._sig_count_text.connect(self.counter.count_text)
        self.counter.sig_text_counted.connect(self._on_text_counted)
        self.attached: dict[int, list] = {}  # chat id -> the Attachments of the message being written there
        self.attachment_tokens: dict[int, int] = {}  # an attachment's key -> its tokens alone
        self._attachment_keys = itertools.count(1)  # (a key crosses to the counter as a C int: not id())
        self.attachment_key: dict[int, int] = {}  # id(Attachment) -> its key
        from .workers import TaskRunner

        self.tasks = TaskRunner(self)  # reads attached files (a PDF can take a while)
        self._count_serial = 0
        self.drafts: dict[int, str] = {}  # chat id -> the message being written there (not saved)
        self.overflow_cid: int | None = None  # the chat whose last message did not fit (the offers act on it)
        self.count_timer = QTimer(self)
        self.count_timer.setSingleShot(True)
        self.count_timer.setInterval(COUNT_MS)
        self.count_timer.timeout.connect(self.count_context)
        # The local server shares the worker's engine queue: one copy of the weights, one line for replies.
        self.server = ServerControl(self.worker.queue, self)
        self._served: tuple | None = None  # (host, port, key, names, origins) the server was last started with
        self.apply_server_settings()
        self.flush_timer = QTimer(self)
        self.flush_timer.setInterval(FLUSH_MS)
        self.flush_timer.timeout.connect(self._flush)
        self.persist_timer = QTimer(self)
        self.persist_timer.setInterval(PERSIST_MS)
        self.persist_timer.timeout.connect(self._persist)

    def _mark_interrupted(self) -> int:
        """Replies left incomplete by a process that died mid-reply: saved as interrupted, with what they had.
        Adding a reply's message makes its chat the most recently updated one, and at most two replies are
        ever open (one stopping, one streaming), so only the newest chats need looking at, not all history."""
        count = 0
        for conv in self.history.conversations()[:5]:
            for m in self.history.all_messages(conv.id, full=False):  # every branch: a version may have been streaming
                if m.role == "assistant" and not m.complete:
                    self.history.finish_message(m.id, {**m.meta, "finish_reason": INTERRUPTED})
                    count += 1
        if count:
            log.info("marked %d reply(ies) interrupted by the last session's end", count)
        return count

    # ------------------------------------------------------------------ model

    def load_model(self, folder: str, resident: str = "", is_demo: bool = False) -> None:
        self.stop()
        self.loaded = None
        self._sig_load.emit(folder, resident, is_demo)

    def unload_model(self) -> None:
        """Frees the model's memory (the worker waits for the engine's line to be free): replies stop first."""
        if self.loaded is None:
            return
        self.stop()
        self.loaded = None
        self._sig_unload.emit()
        self._sig_count_model.emit("")
        self.sig_model_unloaded.emit()
        self.count_context()

    def cancel_load(self) -> None:
        """Stops the load in progress before its next tensor (a thread-safe flag: the worker is busy)."""
        self.worker.cancel_load()

    @Slot(object)
    def _on_loaded(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        # the saved depth if this model can run it, else the nearest usable one below (depth.usable_level);
        # else the engine's default; else the lowest that runs
        levels = list(loaded.levels)
        usable = usable_level(levels, self.depth) or usable_level(levels, loaded.default_depth) or \
            next((s for s in levels if s.available), None)
        self.depth = usable.name if usable is not None else self.depth
        notice = self._avoid_estimated()
        self._sig_count_model.emit(loaded.folder)
        self.sig_model_loaded.emit(loaded)
        self.sig_depth.emit(self.depth)
        if notice:
            self.sig_notice.emit(notice)
        self.count_context()

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self.sig_model_failed.emit(message)

    def apply_server_settings(self) -> None:
        """Starts, stops or restarts the local server as the settings now say (a start that failed is
        tried again); the outcome arrives as `server.sig_status`."""
        s = self.settings
        wanted = (s.server_host, s.server_port, s.server_api_key, tuple(s.server_allow_hosts),
                  tuple(s.server_allow_origins)) if s.server_enabled else None
        if wanted == self._served and not self.server.status().error:
            return
        self._served = wanted
        if wanted is None:
            self.server.stop()
        else:
            self.server.start(*wanted)

    # ------------------------------------------------------------------ depth

    def set_depth(self, name: str) -> None:
        """The chat's depth for the next reply; while the reply shown thinks, the rest of its thought too."""
        if self.loaded is None or any(s.name == name for s in self.loaded.levels):
            self.depth = name
            if self.settings.depth != name:
                self.settings.depth = name
                self.save_settings()
            self.sig_depth.emit(name)
            self._steer_depth(name)
            self.count_context()  # thinking on or off changes the prompt's end

    # ------------------------------------------------------------------ steering the thought in flight

    def _steerable(self) -> Reply | None:
        """The reply shown, while it thinks and no end of its thought was asked for."""
        r = self.reply_in(self.current)
        return r if r is not None and r.phase == "thinking" and not r.ending_thought else None

    def _steer_depth(self, name: str) -> None:
        """The rest of the thought goes to level `name`'s thinker and budget (what was thought counts), and
        climbs from there if the level is Auto."""
        r = self._steerable()
        level = next((s for s in self.loaded.levels if s.name == name), None) if self.loaded else None
        if r is None or level is None or not level.available:
            return
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
        self._update_live_phase()
        return True

    @property
    def think_longer_tokens(self) -> int:
        ceiling = self.loaded.thinking_ceiling if self.loaded else 0
        return max(1, round(ceiling * THINK_LONGER_PART))

    def think_longer(self) -> int:
        """Gives the shown reply's thought more budget; returns how much (0 when it is not thinking)."""
        r = self._steerable()
        if r is None:
            return 0
        r.controls.think_longer(self.think_longer_tokens)
        return self.think_longer_tokens

    def _update_live_phase(self) -> None:
        r = self.reply_in(self.current)
        phase = "" if r is None else "thinking" if self._steerable() is not None else "answer"
        if phase != self.live_phase:
            self.live_phase = phase
            self.sig_live_phase.emit(phase)

    def _avoid_estimated(self) -> str:
        """A chat never starts on a level whose thinker's widths are only estimated: such a depth becomes
        the engine's default; returns the line that says why ('' when nothing changed)."""
        level = next((s for s in self.loaded.levels if s.name == self.depth), None) if self.loaded else None
        default = self.loaded.default_depth if self.loaded else ""
        if level is None or not level.estimated or not default or default == level.name:
            return ""
        self.depth = default
        return (f"Reasoning depth is {default}, not {level.name}: {level.name} would think with {level.think}, whose "
                "widths are only estimated (not verified against a published slice). Verify nesting in the model "
                f"manager, or choose {level.name} again for this chat.")

    def lower_level(self) -> str | None:
        """The next available level below the current depth (offered when a reply runs out of memory)."""
        lower = lower_level(list(self.loaded.levels), self.depth) if self.loaded else None
        return lower.name if lower is not None else None

    # ------------------------------------------------------------------ conversations

    def refresh_conversations(self, search: str = "") -> None:
        self.sig_conversations.emit(self.history.conversations(search), self.current)

    def new_conversation(self) -> None:
        """A new chat, unless the one shown is still empty (then that one is the new chat)."""
        self.cancel_edit()
        if self.current is not None and not self.history.messages(self.current):
            self.refresh_conversations()
            return
        conv = self.history.new_conversation(system_prompt=self.settings.system_prompt)
        self.select(conv.id)
        notice = self._avoid_estimated()  # new chats start on the default too
        if notice:
            self.sig_depth.emit(self.depth)
            self.sig_notice.emit(notice)

    def select(self, cid: int) -> None:
        """Shows chat `cid`; a reply in flight elsewhere keeps streaming into its own chat."""
        if cid != self.current:
            self.cancel_edit()
        self.current = cid
        reply = self.reply_in(cid)
        self.sig_chat_shown.emit(cid, self._messages_with_live(cid), reply.message_id if reply else None)
        self.refresh_conversations()
        self._update_live_phase()
        self._show_attachments()
        self.count_context()

    def _messages_with_live(self, cid: int) -> list[Message]:
        """The stored messages, with a reply in flight as far as it has got (not only its last save)."""
        reply = self.reply_in(cid)
        out = self.history.messages(cid)
        if reply is not None:
            out = [dataclasses.replace(m, content="".join(reply.answer), thinking="".join(reply.thinking),
                                       meta=reply.meta(), complete=False) if m.id == reply.message_id else m
                   for m in out]
        return out

    def ensure_conversation(self) -> None:
        convs = self.history.conversations()
        if convs:
            self.select(convs[0].id)
        else:
            self.new_conversation()

    @_refuses_read_only
    def rename(self, cid: int, title: str) -> None:
        self.history.rename(cid, title)
        self.refresh_conversations()

    @_refuses_read_only
    def delete(self, cid: int) -> None:
        title = self.history.conversation(cid).title
        for r in self._live():
            if r.conversation_id == cid:
                self._stop_reply(r)
        self.history.delete(cid)
        self.sig_deleted.emit(cid, title)
        if self.current == cid:
            self.current = None
            self.ensure_conversation()
        else:
            self.refresh_conversations()

    @_refuses_read_only
    def undelete(self, cid: int) -> None:
        self.history.undelete(cid)
        self.select(cid)

    def export_chat(self, path: str, as_json: bool) -> bool:
        """Writes the chat shown to `path`: JSON (every version, the reply details) or Markdown (to read)."""
        import json
        import os

        from .state.chat_files import chat_json, chat_markdown

        if self.current is None:
            return False
        text = json.dumps(chat_json(self.history, self.current), ensure_ascii=False, indent=1) if as_json \
            else chat_markdown(self.history, self.current)
        tmp = Path(f"{path}.part")
        try:
            tmp.write_text(text + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            self.sig_error.emit(f"The chat could not be exported to {path} ({e.strerror or e}); choose another "
                                "folder.", "")
            return False
        self.sig_notice.emit(f"Exported “{self.history.conversation(self.current).title}” to {path}.")
        return True

    @_refuses_read_only
    def import_chat(self, path: str) -> bool:
        """Adds the chat in the JSON file `path` (checked whole first: a bad file imports nothing)."""
        from .state.chat_files import ChatFileError, import_chat

        try:
            cid, note = import_chat(self.history, path)
        except ChatFileError as e:
            self.sig_error.emit(str(e), "")
            return False
        self.select(cid)
        self.sig_notice.emit(note)
        return True

    @_refuses_read_only
    def set_system_prompt(self, prompt: str) -> None:
        """The chat shown's system prompt (a preset chosen in the window), for its next reply."""
        if self.current is not None:
            self.history.update_settings(self.current, prompt, self.history.conversation(self.current).settings)
            self.count_context()

    def conversation_settings(self) -> tuple[str, dict]:
        conv = self.history.conversation(self.current)
        return conv.system_prompt, conv.settings

    @_refuses_read_only
    def set_conversation_settings(self, system_prompt: str, settings: dict) -> None:
        kept = self.history.conversation(self.current).settings  # keys the caller does not set (the tools switch)
        self.history.update_settings(self.current, system_prompt, {**kept, **settings})

    def chat_tools(self) -> tuple[bool, set[str]]:
        """The current chat's tools switch: (tools offered, tools left out)."""
        from .tools_controller import chat_tool_settings

        return chat_tool_settings(self.conversation_settings()[1]) if self.current is not None else (True, set())

    @_refuses_read_only
    def set_chat_tools(self, on: bool, off: set[str]) -> None:
        prompt, settings = self.conversation_settings()
        self.set_conversation_settings(prompt, {**settings, "tools": {"on": on, "off": sorted(off)}})
        self.count_context()

    # ------------------------------------------------------------------ editing a sent message

    def begin_edit(self, message_id: int) -> str | None:
        msg = next((m for m in self.history.messages(self.current) if m.id == message_id and m.role == "user"), None)
        if msg is None:
            return None
        self.editing, self.editing_text = message_id, msg.content
        self.sig_editing.emit(msg.content)
        return msg.content

    def cancel_edit(self) -> None:
        if self.editing is not None:
            self.editing = None
            self.sig_editing.emit("")

    # ------------------------------------------------------------------ replies

    def _live(self) -> list[Reply]:
        return [r for r in self.replies.values() if not r.stopping]

    def reply_in(self, cid: int | None) -> Reply | None:
        """The reply streaming in chat `cid` (at most one; a stopped one waiting for its end does not count)."""
        return next((r for r in self._live() if r.conversation_id == cid), None)

    @property
    def busy(self) -> bool:
        return bool(self.replies)

    @_refuses_read_only
    def send(self, text: str) -> bool:
        """Sends `text` in the current chat; while editing, as a new version of the edited message (the
        earlier version and what followed it stay, as the other branch)."""
        text = text.strip()
        if self.current is None:
            self.new_conversation()
        files = [a.to_dict() for a in self.attached.get(self.current, [])] if self.editing is None else []
        if (not text and not files) or self.loaded is None:
            return False
        cid = self.current
        self.stop(cid)  # this chat's reply in flight; one in another chat goes on, and this one waits its turn
        if self.editing is not None:
            edited = next((m for m in self.history.messages(cid) if m.id == self.editing), None)
            self.cancel_edit()
            if edited is not None:
                files = edited.meta.get("attachments") or []  # a new version keeps the files of the old
                self._branch_at(cid, edited.parent_id)
        if not self.history.messages(cid):
            self.history.rename(cid, (text.splitlines() or [files[0]["name"]])[0][:48])
        user = self.history.add_message(cid, "user", text, meta={"attachments": files} if files else None)
        sent = self.attached.pop(cid, [])
        for a in sent:
            self.attachment_tokens.pop(self.attachment_key.pop(id(a), 0), None)
        if sent:
            self._show_attachments()
        self.refresh_conversations()
        self._start_reply(cid, [user])
        return True

    @_refuses_read_only
    def regenerate(self) -> None:
        """Answers the current chat's last question again, as a new version of its last reply (a reply in
        flight is stopped and kept as the other version)."""
        cid = self.current
        msgs = self.history.messages(cid) if cid is not None else []
        last = next((m for m in reversed(msgs) if m.role == "assistant"), None)
        if last is None or self.loaded is None:
            return
        self.stop(cid)
        self.cancel_edit()
        self._branch_at(cid, last.parent_id)
        self._start_reply(cid, [])

    def _branch_at(self, cid: int, parent: int) -> None:
        """The chat shows its branch up to message `parent` (0: nothing), where a new version starts;
        the view is rebuilt from it."""
        self.history.set_leaf(cid, parent)
        self.select(cid)

    @_refuses_read_only
    def show_version(self, message_id: int, step: int) -> None:
        """The `< 1/2 >` of a message: shows its previous (step -1) or next (+1) version, and that version's
        newest continuation."""
        cid = self.current
        m = next((m for m in self.history.messages(cid) if m.id == message_id), None) if cid is not None else None
        if m is None or not m.versions:
            return
        i = m.versions.index(m.id) + step
        if 0 <= i < len(m.versions):
            self.cancel_edit()
            self.history.show_version(cid, m.versions[i])
            self.select(cid)

    def _chat_messages(self, cid: int, before: int | None = None) -> list[dict]:
        """What the next reply in chat `cid` is asked with: the system prompt and the finished turns (those
        before message `before` alone, when it is being edited)."""
        conv = self.history.conversation(cid)
        messages = ([{"role": "system", "content": conv.system_prompt}] if conv.system_prompt else [])
        shown = self.history.messages(cid)
        if before is not None:
            shown = shown[:next((i for i, m in enumerate(shown) if m.id == before), len(shown))]
        from runtime.tool_loop import replay_messages, saved_rounds

        for m in shown:
            if m.role in ("user", "assistant") and m.complete:  # a reply's tool rounds, as the model saw them
                messages += replay_messages(saved_rounds(m.meta)) if m.role == "assistant" else []
                messages.append(m.as_chat())
        return messages

    def _request(self, cid: int, level):
        from runtime.generate import ChatRequest

        conv = self.history.conversation(cid)
        return ChatRequest(tuple(self._chat_messages(cid)), level.think, level.answer, level.budget,
                           self.settings.max_new_tokens, sampling_for(self.settings.sampling, conv.settings),
                           escalation=level.escalation)

    def _start_reply(self, cid: int, added: list[Message], overflow: str | None = None) -> None:
        from runtime.controls import Controls
        from runtime.depth import find_level
        from runtime.errors import ElasticError
        from runtime.events import Progress

        try:
            level = find_level(list(self.loaded.levels), self.depth)
            request = self._request(cid, level)
        except ElasticError as e:
            self.sig_messages_added.emit(cid, added, None)
            self.sig_error.emit(str(e), "")
            return
        submodel = level.think or level.answer
        phase = "thinking" if level.think else "answer"
        ahead = next((x for x in self._live() if x.conversation_id != cid), None)
        if ahead is not None:  # the engine has one line: this reply waits for that one to end
            title = self.history.conversation(ahead.conversation_id).title
            self.sig_notice.emit(f"This reply starts when the one in “{title[:40]}” ends (one reply at a time; "
                                 "stop that one there to start this one now).")
        reply = Reply(next(self._ids), cid, 0, Controls(), level, submodel, phase, Progress())
        msg = self.history.add_message(cid, "assistant", "", meta=reply.meta(), complete=False)
        reply.message_id = msg.id
        self.replies[reply.request_id] = reply
        self.sig_messages_added.emit(cid, added + [msg], msg.id)
        self.sig_reply_started.emit(cid, msg.id, submodel, phase)
        self.sig_busy.emit(True)
        self._update_live_phase()
        self.flush_timer.start()
        self.persist_timer.start()
        job = self.tools.job(reply.request_id, cid, request, self.history.conversation(cid).settings)
        self._sig_generate.emit(reply.request_id, job or request, reply.controls,
                                overflow or self.settings.context_overflow)

    # ------------------------------------------------------------------ the context

    def set_draft(self, text: str) -> None:
        """The message box's text in the chat shown (kept per chat); the meter counts it after a pause."""
        if self.editing is not None:
            self.editing_text = text
        elif self.current is not None:
            if text:
                self.drafts[self.current] = text
            else:
                self.drafts.pop(self.current, None)
        self.count_timer.start()

    def draft(self, cid: int | None) -> str:
        return self.drafts.get(cid, "") if cid is not None else ""

    def context_limits(self) -> tuple[int, int]:
        """(the most tokens a prompt may hold and leave the reply its room, the context length)."""
        from .context_fit import reply_room

        context = self.loaded.status.max_context if self.loaded else self.settings.context
        return context - reply_room(context, self.settings.max_new_tokens), context

    def count_context(self) -> None:
        """Asks the counter for the next reply's prompt in the chat shown, the draft included (the answer
        comes as `sig_context`); a newer ask makes an older one stale."""
        from runtime.depth import find_level
        from runtime.errors import ElasticError

        self.count_timer.stop()
        limit, context = self.context_limits()
        if self.loaded is None or self.current is None:
            self.sig_context.emit(-1, limit, context, "no model is loaded")
            return
        try:
            level = find_level(list(self.loaded.levels), self.depth)
            messages = self._chat_messages(self.current)
        except (ElasticError, KeyError) as e:
            self.sig_context.emit(-1, limit, context, str(e))
            return
        text = self.editing_text if self.editing is not None else self.draft(self.current)
        if self.editing is not None:  # the edited message replaces itself and what followed it
            messages = self._chat_messages(self.current, before=self.editing)
        files = [] if self.editing is not None else [a.to_dict() for a in self.attached.get(self.current, [])]
        if text.strip() or files:
            messages.append(Message(0, self.current, "user", text.strip(), meta={"attachments": files}).as_chat())
        self._count_serial += 1
        self.counter.ask(self._count_serial)
        tools = self.tools.offered_tools(self.conversation_settings()[1])  # their text is in the prompt too
        self._sig_count.emit(self._count_serial, tuple(messages), level.think is not None and level.budget != 0,
                             tools)

    @Slot(int, int, str)
    def _on_counted(self, serial: int, tokens: int, why: str) -> None:
        if serial == self._count_serial:
            self.sig_context.emit(tokens, *self.context_limits(), why)

    @Slot(int, int, int)
    def _on_fitted(self, request_id: int, tokens: int, dropped: int) -> None:
        r = self.replies.get(request_id)
        if r is not None:
            r.prompt_tokens, r.dropped = tokens, dropped
            if dropped and not r.removed and r.conversation_id == self.current:
                self.sig_notice.emit(f"This chat is longer than the context: its {dropped} earliest message"
                                     f"{'s were' if dropped > 1 else ' was'} left out of this reply "
                                     "(Settings → Defaults: context length, and what to do when a chat is longer).")

    @Slot(int, int, int, int, bool)
    def _on_overflow(self, request_id: int, tokens: int, limit: int, context: int, trimmable: bool) -> None:
        """The reply could not start: its chat does not fit. Its empty message goes; the question stays,
        and the window offers what to do (leave out turns, take the message back, a longer context)."""
        r = self.replies.get(request_id)
        if r is None:
            return
        r.removed = True
        self.history.delete_message(r.conversation_id, r.message_id)
        self._close(r, "", "", {})
        if r.conversation_id == self.current:
            self.select(r.conversation_id)
        self.overflow_cid = r.conversation_id
        ceiling = self.loaded.context_ceiling if self.loaded else 0
        longer = (f", or raise the context length in Settings (up to {ceiling:,} tokens fit this PC's memory)"
                  if ceiling > context else "")
        fits = f"the context of {context:,} holds at most {limit:,} with room for the reply"
        if trimmable:
            text = (f"Nothing was sent: this chat is {tokens:,} tokens, and {fits}. Leave out its earliest turns"
                    + (f", take your message back to shorten it{longer}." if longer else
                       " or take your message back to shorten it."))
        else:
            text = (f"Nothing was sent: your message is too long for the context even alone ({tokens:,} tokens; "
                    f"{fits}). Take it back to shorten it or attach less{longer}.")
        self.sig_overflow.emit(text, trimmable)

    @_refuses_read_only
    def send_leaving_out(self) -> bool:
        """The overflow offer: answers the refused chat's last question with its earliest turns left out."""
        cid, self.overflow_cid = self.overflow_cid, None
        if cid is None or self.loaded is None or self.reply_in(cid) is not None:
            return False
        from .context_fit import KEEP_SYSTEM

        self.select(cid)
        self._start_reply(cid, [], overflow=KEEP_SYSTEM)
        return True

    @_refuses_read_only
    def take_back(self) -> bool:
        """The overflow offer: removes the refused chat's last message (its text goes back to the box)."""
        cid, self.overflow_cid = self.overflow_cid, None
        last = self.history.messages(cid)[-1:] if cid is not None else []
        if not last or last[0].role != "user":
            return False
        self.history.delete_message(cid, last[0].id)
        files = last[0].meta.get("attachments") or []
        if files:  # its files come back with its text
            from .state.attachments import Attachment

            self.attached[cid] = [Attachment(a["name"], a["text"], a.get("kind", "text")) for a in files]
            for a in self.attached[cid]:
                self._count_attachment(a)
        self.select(cid)
        self.drafts[cid] = last[0].content
        self.sig_take_back.emit(last[0].content)
        self.count_context()
        return True

    # ------------------------------------------------------------------ attachments

    def attach(self, path: str) -> None:
        """Reads the file at `path` in a worker thread and attaches it to the message being written in the
        chat shown (a refusal is the error line)."""
        from .state.attachments import read_attachment

        cid = self.current
        if cid is None:
            return
        self.tasks.run(read_attachment, (path,), functools.partial(self._attached, cid), self._not_attached)

    def _attached(self, cid: int, attachment) -> None:
        self.attached.setdefault(cid, []).append(attachment)
        self._count_attachment(attachment)
        if attachment.note:
            self.sig_notice.emit(f"{attachment.name} is attached: {attachment.note}.")
        if cid == self.current:
            self._show_attachments()
            self.count_context()

    def _count_attachment(self, attachment) -> None:
        key = self.attachment_key[id(attachment)] = next(self._attachment_keys)
        self._sig_count_text.emit(key, attachment.text)

    def _not_attached(self, message: str) -> None:
        self.sig_error.emit(message, "")

    def detach(self, index: int) -> None:
        files = self.attached.get(self.current, [])
        if 0 <= index < len(files):
            self.attachment_tokens.pop(self.attachment_key.pop(id(files.pop(index)), 0), None)
            self._show_attachments()
            self.count_context()

    @Slot(int, int)
    def _on_text_counted(self, key: int, tokens: int) -> None:
        self.attachment_tokens[key] = tokens
        self._show_attachments()

    def _show_attachments(self) -> None:
        files = self.attached.get(self.current, [])
        self.sig_attachments.emit([(a.name, self.attachment_tokens.get(self.attachment_key.get(id(a), 0), -1), a.note)
                                   for a in files])

    def stop(self, cid: int | None = None) -> None:
        """Stops the replies in flight (the decode loop sees the flag within one token; each one's Done saves
        it): those of chat `cid` alone when given, else every one (a model load, an unload)."""
        for r in self._live():
            if cid is None or r.conversation_id == cid:
                self._stop_reply(r)

    def stop_shown(self) -> None:
        """Esc and Stop: the reply of the chat shown, never one streaming in another chat."""
        if self.current is not None:
            self.stop(self.current)

    def _stop_reply(self, r: Reply) -> None:
        r.controls.stop()
        self.tools.reply_ended(r.request_id)  # a consent it waits for is declined
        r.stopping = True
        self._update_live_phase()

    @Slot(int, object)
    def _on_event(self, request_id: int, event) -> None:
        r = self.replies.get(request_id)
        if r is None:
            return  # a late event of a reply already closed
        kind, r.progress = event.type, getattr(event, "progress", None) or r.progress  # (a tool result has none)
        if kind == "prefill":  # its turn came: the view stops saying it waits
            r.submodel, r.dirty = event.submodel, True
        elif kind == "token":
            (r.thinking if event.phase == "thinking" else r.answer).append(event.text)
            phase_changed = r.phase != event.phase
            r.phase, r.submodel, r.dirty = event.phase, event.submodel, True
            if phase_changed:
                self._update_live_phase()
            if not r.stopping and event.token_id is not None and r.conversation_id == self.current:
                # (a Token of no new token only releases text; the strip shows the chat on screen alone)
                p = event.progress
                self.sig_token.emit(event.submodel, event.phase, event.latency_ms, p.ttft_ms, p.tokens_per_s)
        elif kind == "switch":
            r.switches.append(event)
            r.submodel = event.to_submodel
            if event.reason == "answer":  # thinking is over: the answering submodel takes over
                r.phase = "answer"
                self._update_live_phase()
            if not r.stopping and r.conversation_id == self.current:
                self.sig_switch.emit(event.from_submodel, event.to_submodel, event.reprefill_tokens, event.ms,
                                     event.reason)
        elif kind in ("tools_ready", "tool_call", "invalid_tool_call", "tool_result", "tool_round"):
            self._on_tool_event(r, event)
        elif kind == "done":
            self._finish(r, event)

    @Slot(int, object, object)
    def _consent_asked(self, request_id: int, call, box) -> None:
        """A call waits for the user's consent: shown as asking, and the window asks (sig_consent)."""
        r = self.replies.get(request_id)
        if r is None or r.stopping:
            self.tools.answered(request_id, box, "decline")
            return
        for c in r.calls:
            if c["id"] == call.id:
                c["status"], c["server"] = "asking", call.server
        self.sig_tool_rounds.emit(r.conversation_id, r.message_id, r.shown_rounds())
        self.sig_consent.emit(request_id, call, box)

    def _on_tool_event(self, r: Reply, event) -> None:
        """A tool event of the reply's loop (runtime/tool_loop.py): the calls shown live, then each round's
        record; a round's texts move into its record and the next round streams afresh."""
        kind = event.type
        if kind == "tools_ready":
            for problem in event.problems:
                self.sig_error.emit(problem, "")
            return
        if kind == "tool_call":
            r.calls.append({"id": event.id, "name": event.name, "server": "", "arguments": event.arguments,
                            "content": "", "is_error": False, "status": "pending", "ms": 0})
        elif kind == "tool_result":
            r.calls = [c for c in r.calls if c["id"] != event.id] + [event.to_dict()]
        elif kind == "tool_round":
            r.rounds.append(event.to_dict())
            r.calls, r.thinking, r.answer, r.dirty = [], [], [], True
        if not r.removed:
            self.sig_tool_rounds.emit(r.conversation_id, r.message_id, r.shown_rounds())

    @Slot(int, str)
    def _on_reply_failed(self, request_id: int, message: str) -> None:
        r = self.replies.get(request_id)
        if r is not None:
            self._close(r, "".join(r.answer), "".join(r.thinking), {**r.meta(), "finish_reason": "error",
                                                                     "error": message})
            self._report_failure(message)

    def _report_failure(self, message: str) -> None:
        lower = self.lower_level() if "memory" in message.lower() else None
        hint = f" Try the lower reasoning depth {lower}." if lower else ""
        self.sig_error.emit(f"The reply failed: {message}.{hint}", lower or "")

    def _flush(self) -> None:
        for r in self._live():
            if r.dirty:
                r.dirty = False
                self.sig_stream.emit(r.conversation_id, r.message_id, "".join(r.answer), "".join(r.thinking),
                                     r.submodel, r.phase == "thinking", r.progress)

    @_refuses_read_only
    def _persist(self) -> None:
        for r in self.replies.values():
            if not r.removed:
                self.history.update_message(r.message_id, "".join(r.answer), "".join(r.thinking), r.meta(),
                                            complete=False)

    def _finish(self, r: Reply, done) -> None:
        if r.removed:  # nothing to save or show: its message is gone, and its id may be the new reply's
            self._close(r, "", "", {})
            return
        r.switches = list(done.switches)
        meta = {**r.meta(), "think_submodel": done.think_submodel, "answer_submodel": done.answer_submodel,
                "thinking_budget": done.thinking_budget,
                **{k: v for k, v in done.to_dict().items() if k != "type"}}
        self._close(r, done.answer_text, done.thinking_text, meta)
        if done.finish_reason == "error":
            self._report_failure(done.error or "unknown error")
        if r.conversation_id == self.current:
            self.sig_done.emit(done)

    def _close(self, r: Reply, answer: str, thinking: str, meta: dict) -> None:
        del self.replies[r.request_id]
        self.tools.reply_ended(r.request_id)
        if not self.replies:
            self.flush_timer.stop()
            self.persist_timer.stop()
        self._update_live_phase()
        if r.removed:
            self.sig_busy.emit(bool(self.replies))
            return
        try:
            self.history.update_message(r.message_id, answer, thinking, meta, complete=True)
        except HistoryReadOnly as e:  # a full disk: the reply is shown, the banner says it is not saved
            self.sig_error.emit(str(e), "")
        self.sig_reply_done.emit(r.conversation_id, Message(r.message_id, r.conversation_id, "assistant", answer,
                                                            thinking, meta, True))
        self.sig_busy.emit(bool(self.replies))
        self.refresh_conversations()
        if r.conversation_id == self.current:
            self.count_context()

    def save_settings(self) -> None:
        """Writes the settings now: every change is saved when it is made, so a kill loses none. A
        failure is one line for the user (once per reason), never an exception."""
        problem = self.settings.save(self.settings_path)
        if problem and problem != self._settings_problem:
            self.sig_error.emit(f"{problem}. Free space or fix the folder's permissions; "
                                "the change applies until you quit.", "")
        self._settings_problem = problem

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Explicit, in this order: stop the server (its replies end, its thread joins), stop the replies,
        stop the engine thread, save what the replies had, save the settings, close the history."""
        self.server.shutdown()
        self.flush_timer.stop()
        self.persist_timer.stop()
        for r in self.replies.values():
            r.controls.stop()
        self.worker.cancel_load()  # a load or its warm-up in flight stops too (it held the quit 12-19 s)
        stop_thread(self.thread)  # the decode loop sees the stop flag within a token, then the thread ends
        self.count_timer.stop()
        self.tasks.shutdown()
        self.counter.blockSignals(True)
        stop_thread(self.counter_thread)
        QCoreApplication.sendPostedEvents(self, QEvent.Type.MetaCall)  # the replies' Done events, if they came
        for r in list(self.replies.values()):
            self._close(r, "".join(r.answer), "".join(r.thinking), {**r.meta(), "finish_reason": "stopped"})
        self.worker.unload()
        self.tools.shutdown()  # the MCP servers end with the app
        self.settings.depth = self.depth
        self.settings.save(self.settings_path)
        self.history.close()
