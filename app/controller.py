"""The chat controller: the app's state on the GUI thread, between the widgets and the engine worker.

A small front over one part per concern, each the one owner of its facts:
- `chats` (app/conversations.py Conversations): the chat shown and what the user does to a chat;
- `composer` (app/composer.py Composer): the message being written: drafts, the edit, attached files;
- `replies` (app/replies.py Replies): the replies in flight, bound to their chats, never to a view;
- `steering` (app/steering.py Steering): steering the thought of the reply shown, and its live phase;
- `depth` (app/depth_choice.py DepthChoice): the reasoning depth the next reply runs at;
- `context` (app/context_count.py ContextCount): the context meter's count;
- `overflow` (app/overflow.py Overflow): a chat too long for the context, and its offers;
- `saves` (app/pending_saves.py PendingSaves): replies' saves waiting while another program holds the history.
The front owns the loaded model's description, the engine worker and its thread, the history, the
settings file, the local server and the tools, and the signals the window listens to: the widgets only
show what it emits and call its parts; it never holds a widget.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QTimer, Signal, Slot

from runtime.api import counted

from .composer import Composer
from .context_count import ContextCount
from .conversations import Conversations
from .crash import LoadRecord
from .depth_choice import DepthChoice
from .overflow import Overflow
from .pending_saves import PendingSaves
from .replies import Replies
from .reply import mark_interrupted
from .send_queue import SendQueue
from .server_control import ServerControl
from .state.history import History, HistoryBusy
from .state.settings import Settings
from .steering import Steering
from .workers import EngineWorker, LoadedModel, start_in_thread, stop_thread

log = logging.getLogger(__name__)


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
    # a reply waits for its turn (conv id, message id, what runs ahead), or its turn came ("" ahead)
    sig_reply_waiting = Signal(int, int, str)
    # conv id, message id, answer, thinking, submodel, thinking live, the last event's runtime.events.Progress
    sig_stream = Signal(int, int, str, str, str, bool, object)
    sig_tokens = Signal(object)  # app.reply.TokenBatch: the shown reply's tokens of one frame, for the strip
    sig_switch = Signal(str, str, int, float, str)  # from, to, re-prefilled tokens, ms, reason (Switch.reason)
    sig_reply_done = Signal(int, object)  # conversation id, the saved Message
    sig_done = Signal(object)  # the runtime's Done event (for the live strip)
    sig_error = Signal(str, str)  # message, a lower depth level to offer ("" when none)
    sig_error_withdrawn = Signal(str)  # an error said before no longer holds (a file refused, then one attached)
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
    # reply its room, the context length, why it was not counted ("" when it was), and whether what the
    # overflow policy never leaves out (the newest turn) fits that most (False: leaving turns out cannot help)
    sig_context = Signal(int, int, int, str, bool)
    # a chat that does not fit the context: the line for the user, and whether leaving out turns would do
    sig_overflow = Signal(str, bool)
    sig_take_back = Signal(str)  # a message taken back from the chat: its text, for the message box
    # the files attached to the message being written in the chat shown: [(name, tokens or -1, note)]
    sig_attachments = Signal(object)
    # requests to the engine worker (queued: it lives in its own thread)
    _sig_load = Signal(str, str, bool)
    _sig_unload = Signal()

    def __init__(self, data_dir: Path, settings: Settings, settings_path: Path, probe_file: str | None = None):
        super().__init__()
        self.data_dir, self.settings, self.settings_path = Path(data_dir), settings, settings_path
        self.history = History(self.data_dir / "history.sqlite3")
        self.interrupted = self._tidy_history()
        self.loaded: LoadedModel | None = None
        self.loading = False  # a load asked for has not ended (loaded, failed or cancelled) yet
        self._settings_problem = ""  # the last reason settings could not be saved (said once)
        self.load_record = LoadRecord(self.data_dir)  # a model that failed or crashed loading is not reloaded unasked
        self.worker = EngineWorker(settings.context, probe_file, self.load_record)
        self.thread = start_in_thread(self.worker, "engine")
        self._connect_worker()
        from .tools_controller import ToolsController

        self.tools = ToolsController(self.data_dir, self)  # MCP servers, approvals, consent (docs/tools.md)
        QTimer.singleShot(0, self.tools.start_approved)  # once the window's loop runs
        self.depth = DepthChoice(settings, self.save_settings, lambda: self.loaded)
        self.saves = PendingSaves(self)
        self.chats = Conversations(self)
        self.context = ContextCount(self)
        self.composer = Composer(self)
        self.replies = Replies(self)
        self.queue = SendQueue(self)
        self.steering = Steering(self)
        self.overflow = Overflow(self)
        self.tools.sig_servers.connect(self.context.count)  # the tools offered are part of the prompt
        # The local server shares the worker's engine queue: one copy of the weights, one line for replies.
        self.server = ServerControl(self.worker.queue, self)
        self.server.apply(settings)

    def _tidy_history(self) -> int:
        """At start: chats deleted a day ago go, replies a crash left open are marked interrupted; returns how
        many were. Another program holding the file puts both off to the next start (nothing is lost)."""
        try:
            self.history.purge_deleted(older_than_s=24 * 3600)
            return mark_interrupted(self.history)
        except HistoryBusy as e:
            log.warning("tidying the history is left for the next start: %s", e)
            return 0

    def _connect_worker(self) -> None:
        w = self.worker
        w.sig_loaded.connect(self._on_loaded)
        w.sig_load_failed.connect(self._on_load_failed)
        w.sig_load_progress.connect(self.sig_load_progress)
        w.sig_load_cancelled.connect(self._on_load_cancelled)
        self._sig_load.connect(w.load)
        self._sig_unload.connect(w.unload)

    # ------------------------------------------------------------------ the model

    def load_model(self, folder: str, resident: str = "", is_demo: bool = False) -> None:
        self._say_stopped(self.replies.stop(), "Loading a model")
        self.loaded = None
        self.loading = True
        self._sig_load.emit(folder, resident, is_demo)

    def unload_model(self) -> None:
        """Frees the model's memory (the worker waits for the engine's line to be free): replies stop first."""
        if self.loaded is None:
            return
        self._say_stopped(self.replies.stop(), "Unloading the model")
        self.loaded = None
        self._sig_unload.emit()
        self.context.use_model("")
        self.sig_model_unloaded.emit()
        self.context.count()

    def _say_stopped(self, n: int, what: str) -> None:
        """A load or an unload stops the replies in flight (the engine is replaced): it says so, not silently."""
        if n:
            self.sig_notice.emit(f"{what} stopped {counted(n, 'reply', 'replies')} in progress, "
                                 f"{'kept as far as it had got' if n == 1 else 'each kept as far as it had got'}.")

    def cancel_load(self) -> None:
        """Stops the load in progress before its next tensor (a thread-safe flag: the worker is busy)."""
        self.worker.cancel_load()

    @Slot(object)
    def _on_loaded(self, loaded: LoadedModel) -> None:
        self.loaded, self.loading = loaded, False
        notice = self.depth.resolve()
        self.context.use_model(loaded.folder)
        self.sig_model_loaded.emit(loaded)
        self.sig_depth.emit(self.depth.name)
        if notice:
            self.sig_notice.emit(notice)
        self.context.count()

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self.loading = False
        self.sig_model_failed.emit(message)

    @Slot()
    def _on_load_cancelled(self) -> None:
        self.loading = False
        self.sig_load_cancelled.emit()

    # ------------------------------------------------------------------ depth and settings

    def set_depth(self, name: str) -> None:
        """The chat's depth for the next reply (refused when the model cannot run it); while the reply
        shown thinks, the rest of its thought too."""
        if self.depth.choose(name):
            self.sig_depth.emit(name)
            self.steering.steer_depth(name)
            self.context.count()  # thinking on or off changes the prompt's end

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
        self.replies.stop_for_exit()
        self.worker.cancel_load()  # a load or its warm-up in flight stops too (it held the quit 12-19 s)
        stop_thread(self.thread)  # the decode loop sees the stop flag within a token, then the thread ends
        self.composer.tasks.shutdown()
        self.context.shutdown()
        for receiver in (self, self.replies):  # what the engine said last (a load's end, the replies' Done)
            QCoreApplication.sendPostedEvents(receiver, QEvent.Type.MetaCall)
        self.replies.save_at_exit()
        self.saves.save_at_exit()  # one more try for what another program's lock kept waiting
        self.worker.unload()
        self.tools.shutdown()  # the MCP servers end with the app
        self.settings.save(self.settings_path)
        self.history.close()
