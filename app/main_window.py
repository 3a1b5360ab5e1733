"""The main window: conversations, the reasoning-depth slider, the live strip, the chat and
the input. Wiring only: app state lives in ChatController, which the window never outlives and whose
signals it only forwards to the widgets. The widgets are built by app/window_layout.py, the dialogs
live in app/window_dialogs.py, the loaded model's side of the window in app/window_model.py."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QRect, Qt, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMainWindow, QWidget

from runtime.api import counted

from .controller import ChatController
from .models_controller import ModelsController
from .sidebar_fold import SidebarFold
from .state.settings import Settings
from .state.window_state import WindowState, place
from .theme import apply_theme
from .window_dialogs import MCP_TAB, WindowDialogs
from .window_layout import build_menus, build_window
from .window_model import ModelPanel


def _warm_imports() -> None:
    """Does, before the window is interactive, the one-time work worker threads would otherwise do
    while it is: importing (on a cold start, compiling) big modules and building the hub client.
    Either holds the interpreter long enough to stall the GUI for a fraction of a second."""
    import huggingface_hub.hf_api

    import runtime.api  # noqa: F401 (the store, the planner and the download code with it)

    huggingface_hub.hf_api.get_session()  # its TLS context loads the CA bundle, which blocks the interpreter


def _rect(r: QRect) -> tuple[int, int, int, int]:
    return r.x(), r.y(), r.width(), r.height()


def _screens() -> list:
    """The screens, the primary first (window_state.place falls back to it)."""
    primary = QGuiApplication.primaryScreen()
    return [primary, *(s for s in QGuiApplication.screens() if s is not primary)] if primary else []


def restore_frame(window: QWidget, s: WindowState) -> int:
    """Puts a top-level `window` where `s` says, fitted onto the screens there are; its inside's width."""
    x, y, width, height = place(s, [_rect(sc.availableGeometry()) for sc in _screens()])
    window.resize(width, height)
    window.move(x, y)  # a top-level's position is its frame's
    if s.maximized:
        window.setWindowState(window.windowState() | Qt.WindowState.WindowMaximized)
    return width


def frame_of(window: QWidget) -> tuple[int, int, int, int, int, int]:
    """x, y of the frame's corner, the inside's width and height, and what the frame adds (when maximized:
    the normal size and place, so a restart un-maximizes to where the user had it)."""
    frame, inside = window.frameGeometry(), window.geometry()
    left, top = inside.x() - frame.x(), inside.y() - frame.y()
    extra_w, extra_h = frame.width() - inside.width(), frame.height() - inside.height()
    if window.isMaximized():
        inside = window.normalGeometry()
    return inside.x() - left, inside.y() - top, inside.width(), inside.height(), extra_w, extra_h


class MainWindow(QMainWindow):
    def __init__(self, data_dir: Path, settings: Settings, settings_path: Path, checkpoint: str | None = None,
                 probe_file: str | None = None, notice: str = ""):
        """`notice`: a line for the user from before the window existed (the last session crashed)."""
        super().__init__()
        self.setWindowTitle("Elastic Chat")
        self.data_dir, self.settings, self.probe_file = Path(data_dir), settings, probe_file
        # The model manager's state (plan, downloads, tasks) lives as long as the window; the dialog only shows it.
        self.models = ModelsController(probe_file, settings.context, parent=self)
        _warm_imports()
        self.controller = ChatController(data_dir, settings, settings_path, probe_file)
        self._presets_problem = ""  # the presets file's last problem shown
        self._server_error = ""  # the local server's last failure shown in the banner
        self._wait_lines: dict[int, str] = {}  # a waiting reply's message id -> the line that says what it waits for
        build_window(self)
        self.dialogs = WindowDialogs(self)
        build_menus(self)
        self.model_panel = ModelPanel(self)
        self._connect()
        self._restore_geometry()
        self.controller.chats.ensure()
        held = self.model_panel.load_initial(checkpoint)
        self.models.refresh()  # the picker's list of models on this PC (in a worker thread)
        if settings.problem:
            self.notes.show_error(settings.problem)
        if n := self.controller.interrupted:
            notice = (notice + " " if notice else "") + (f"{counted(n, 'reply', 'replies')} it was writing "
                                                         f"{'is' if n == 1 else 'are'} marked “interrupted”.")
        notice = " ".join(part for part in (notice, held) if part)
        if notice:
            self.notes.show_error(notice, kind="banner")

    @property
    def loaded(self):
        return self.controller.loaded

    def _connect(self) -> None:
        c, notes, dialogs = self.controller, self.notes, self.dialogs
        self.sidebar.sig_new.connect(self.new_chat)
        self.sidebar.sig_select.connect(c.chats.select)
        self.sidebar.sig_select.connect(self._open_at_match)
        self.sidebar.sig_rename.connect(c.chats.rename)
        self.sidebar.sig_delete.connect(dialogs.confirm_delete)
        self.sidebar.sig_search.connect(c.chats.refresh)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(c.replies.stop_shown)
        self.answer_now_button.clicked.connect(self.answer_now)
        self.think_longer_button.clicked.connect(self.think_longer)
        self.cancel_edit_button.clicked.connect(self.cancel_edit)
        self.manager_button.clicked.connect(dialogs.open_manager)
        self.settings_button.clicked.connect(lambda: dialogs.open_settings(tab=0))
        self.chats_button.clicked.connect(self.toggle_chats)
        self.depth.sig_changed.connect(c.set_depth)
        self.chat.sig_edit.connect(self.start_edit)
        self.chat.sig_regenerate.connect(c.chats.regenerate)
        self.chat.sig_continue.connect(c.replies.continue_reply)
        self.chat.sig_version.connect(c.chats.show_version)
        c.sig_conversations.connect(self.sidebar.set_conversations)
        c.sig_chat_shown.connect(self.chat.show_chat)
        c.sig_messages_added.connect(self.chat.append)
        c.sig_stream.connect(self.chat.stream)
        c.sig_reply_done.connect(self.chat.finish)
        c.sig_reply_done.connect(self._reply_done)
        c.sig_reply_started.connect(self._reply_started)
        c.sig_reply_waiting.connect(self._reply_waits)
        c.sig_tokens.connect(self.strip.on_tokens)
        c.sig_switch.connect(self.strip.on_switch)
        c.sig_done.connect(self.strip.on_done)
        c.steering.sig_budget_note.connect(self.depth.show_reply_note)
        c.sig_error.connect(notes.show_error)
        c.sig_error_withdrawn.connect(notes.withdraw)
        c.sig_notice.connect(lambda text: notes.show_error(text, kind="banner"))
        self.prompts.sig_chosen.connect(self._preset_chosen)
        self.prompts.sig_save.connect(dialogs.save_preset)
        c.sig_deleted.connect(notes.chat_deleted)
        c.sig_editing.connect(self._editing)
        c.sig_depth.connect(self._depth)
        c.server.sig_status.connect(self._server_status)
        c.sig_live_phase.connect(self._live_phase)
        c.sig_tool_rounds.connect(self.chat.tool_rounds)
        c.sig_consent.connect(dialogs.ask_consent)
        c.tools.sig_consent_ended.connect(dialogs.consent_ended)
        c.sig_chat_shown.connect(lambda *_: self.tools_button.refresh())
        c.tools.sig_servers.connect(self.tools_button.refresh)
        self.tools_button.sig_changed.connect(c.chats.set_tool_switch)
        self.tools_button.sig_manage.connect(lambda: dialogs.open_settings(tab=MCP_TAB))
        c.sig_context.connect(self.meter.show_count)
        c.sig_attachments.connect(self.files.show_files)
        self.files.sig_remove.connect(c.composer.detach)
        self.attach_button.clicked.connect(dialogs.attach_files)
        c.sig_overflow.connect(self._overflow)
        c.sig_take_back.connect(self.input.setPlainText)
        c.sig_chat_shown.connect(self._chat_shown)
        self.input.textChanged.connect(self._draft_changed)
        notes.sig_lower_depth.connect(self._use_lower_depth)
        notes.sig_leave_out.connect(c.overflow.send_leaving_out)
        notes.sig_take_back.connect(self._take_back)
        notes.sig_undelete.connect(c.chats.undelete)
        notes.sig_use_port.connect(self._use_port)

    # ------------------------------------------------------------------ window state

    def _restore_geometry(self) -> None:
        """Last session's frame, sidebar width and chat list choices, fitted onto the screens there are now
        (window_state.place)."""
        s = WindowState.load(self.data_dir)
        self.fold = SidebarFold(self.left_column, (self.chats_button, self.chats_action), s.chats_wide,
                                s.chats_narrow, parent=self)
        self._sidebar_width = s.sidebar
        width = restore_frame(self, s)
        self.fold.fit(width)
        self.split.setSizes([min(s.sidebar, width // 2), max(200, width - s.sidebar)])

    def _save_geometry(self) -> None:
        """The frame the user left: its corner (frameGeometry), the inside's size (geometry), what the frame adds."""
        x, y, width, height, frame_width, frame_height = frame_of(self)
        if self.left_column.isVisible():  # a folded column has no width of its own: keep the last one
            self._sidebar_width = self.split.sizes()[0]
        WindowState(x, y, width, height, self.isMaximized(), self._sidebar_width, frame_width, frame_height,
                    chats_wide=self.fold.shown[False], chats_narrow=self.fold.shown[True]).save(self.data_dir)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fold.fit(self.width())

    def toggle_chats(self) -> None:
        """The Chats button or Ctrl+B: show or hide the left column (and remember it for this width)."""
        if self.left_column.isVisible():
            self._sidebar_width = self.split.sizes()[0]
        self.fold.toggle()
        if self.fold.is_shown():
            self.split.setSizes([min(self._sidebar_width, self.width() // 2),
                                 max(200, self.width() - self._sidebar_width)])

    # ------------------------------------------------------------------ chat

    def send(self) -> None:
        """Sends the box's text; the line shown before goes, but not one the send itself just said (that
        it was queued, what the reply waits for)."""
        lines = self.notes.lines_shown
        if self.controller.chats.send(self.input.toPlainText()):
            self.input.clear()
            if self.notes.lines_shown == lines:  # the send said nothing new: the earlier line goes
                self.notes.hide_error()

    def _draft_changed(self) -> None:
        self.controller.composer.set_draft(self.input.toPlainText())

    @Slot(int, object, object)
    def _chat_shown(self, cid: int, _messages, _streaming) -> None:
        """Each chat keeps its own draft: the box shows the one of the chat shown (not while editing); the
        live strip starts over for it (a reply streaming there fills it again from its next token)."""
        composer = self.controller.composer
        self.show_presets()
        reply = self.controller.replies.reply_in(cid)
        if reply is None:
            self.strip.clear()
        elif not reply.begun:  # rebuilt from the history: it still waits
            self._reply_waiting(cid, reply.message_id, reply.waits_for)
        if composer.editing is None and self.input.toPlainText() != composer.draft(cid):
            self.input.setPlainText(composer.draft(cid))

    def _open_at_match(self, cid: int) -> None:
        """A search's result opens at the first message that matches, not at the chat's end."""
        from .state.history_search import first_matching_message

        c = self.controller
        if c.chats.search.strip():  # (only a search's result reads the chat's messages again)
            self.chat.show_message(first_matching_message(c.history.messages(cid), c.chats.search))

    def show_presets(self) -> None:
        """The prompt presets, the chat shown's system prompt chosen among them."""
        from .state.presets import BUILT_IN, load_presets

        own, problem = load_presets(self.data_dir)
        if problem and problem != self._presets_problem:
            self.notes.show_error(problem, kind="banner")
        self._presets_problem = problem
        prompt = self.controller.chats.settings()[0] if self.controller.chats.current is not None else ""
        self.prompts.show_presets({**BUILT_IN, **own}, prompt)

    def _preset_chosen(self, prompt: str) -> None:
        self.controller.chats.set_system_prompt(prompt)
        self.show_presets()
        self.status.showMessage("The chat's system prompt is set: it applies from the next reply", 4000)

    @Slot(str, bool)
    def _overflow(self, message: str, trimmable: bool) -> None:
        self.strip.clear()  # no reply ran
        self.notes.offer_overflow(message, trimmable)

    def _take_back(self) -> None:
        self.controller.overflow.take_back()
        self.input.setFocus()

    def new_chat(self) -> None:
        self.controller.chats.new()
        self.input.setFocus()

    def escape(self) -> None:
        """Esc: cancels an edit when there is one, else stops the reply."""
        if self.controller.composer.editing is not None:
            self.cancel_edit()
        else:
            self.controller.replies.stop_shown()

    def start_edit(self, message_id: int) -> None:
        text = self.controller.composer.begin_edit(message_id)
        if text is not None:
            self.input.setPlainText(text)
            self.input.setFocus()

    def cancel_edit(self) -> None:
        self.controller.composer.cancel_edit()
        self.input.clear()

    @Slot(str)
    def _editing(self, text: str) -> None:
        self.cancel_edit_button.setVisible(bool(text))
        if text:
            self.status.showMessage("Editing a sent message: Enter resends it and answers again; Esc cancels")
        else:
            self.status.clearMessage()

    @Slot(int, int, str, str)
    def _reply_started(self, cid: int, _message_id: int, submodel: str, phase: str) -> None:
        if cid != self.controller.chats.current:
            return  # the strip shows the chat on screen
        self.strip.reset()
        self.strip.set_badge(submodel, phase)  # the submodel about to work, during the time to first token

    @Slot(int, int, str)
    def _reply_waits(self, cid: int, message_id: int, ahead: str) -> None:
        """A reply waits for `ahead` to end, or ("") its turn came. The line the send just showed ("This reply
        starts when ...") is its; it goes when the turn comes or the reply ends (it stayed, as if it still
        waited)."""
        if ahead:
            if self.notes.error.isVisible():
                self._wait_lines[message_id] = self.notes.error.text()
        else:
            self.notes.withdraw(self._wait_lines.pop(message_id, ""))
        self._reply_waiting(cid, message_id, ahead)

    @Slot(int, object)
    def _reply_done(self, _cid: int, message) -> None:
        """A reply stopped while it waited never had its turn: its waiting line goes too."""
        self.notes.withdraw(self._wait_lines.pop(message.id, ""))

    def _reply_waiting(self, cid: int, message_id: int, ahead: str) -> None:
        """The reply waits for `ahead` to end, or ("") its turn came: the strip and its message say which."""
        r = self.controller.replies.reply_in(cid)
        if cid != self.controller.chats.current or r is None:
            return
        self.strip.set_badge(r.submodel, "waiting" if ahead else r.phase)
        self.chat.waiting(cid, message_id, ahead)

    @Slot(str)
    def _live_phase(self, phase: str) -> None:
        """The reply shown thinks ("thinking"), answers, or there is none: what steering can do now."""
        thinking = phase == "thinking"
        self.stop_button.setEnabled(bool(phase))  # a reply streams in the chat shown
        for w in (self.answer_now_button, self.think_longer_button, self.answer_now_action, self.think_longer_action):
            w.setEnabled(thinking)
        self.depth.set_live(phase)

    def answer_now(self) -> None:
        if self.controller.steering.answer_now():
            self.status.showMessage("Answering now: the thinking ends at the next token", 4000)

    def think_longer(self) -> None:
        tokens = self.controller.steering.think_longer()
        if tokens:
            self.status.showMessage(f"Thinking longer: {tokens} more tokens of budget", 4000)

    @Slot(str)
    def _depth(self, name: str) -> None:
        if self.depth.stops and self.depth.selected != name:
            self.depth.set_stops(self.depth.stops, name)

    def _use_lower_depth(self) -> None:
        """The notes line's offer when a reply ran out of memory."""
        lower = self.controller.depth.lower()
        if lower:
            self.controller.set_depth(lower)

    # ------------------------------------------------------------------ the local server

    @Slot(object)
    def _server_status(self, status) -> None:
        """The live strip's server label; a failure to serve also goes to the banner (once each), which
        goes away when the server runs or is turned off."""
        self.strip.set_server(status.summary)
        if status.error and status.error != self._server_error:
            instead = f"Use port {status.free_port}, or change" if status.free_port else "Change"
            self.notes.show_error(f"The local server is not running: {status.error}. {instead} its address or "
                                  "port in Settings → Server, or turn it off there.")
            if status.free_port:
                self.notes.offer_port(status.free_port)
        elif not status.error and self._server_error and self.notes.error.text().startswith("The local server "):
            self.notes.hide_error()
        self._server_error = status.error

    def _use_port(self, port: int) -> None:
        """The notes line's offer when the port was taken: serve on the free one found, and keep it."""
        self.settings.server_port = port
        self.controller.save_settings()
        self.controller.server.apply(self.settings)

    # ------------------------------------------------------------------ the rest

    def copy_conversation(self) -> None:
        if self.controller.chats.current is not None:
            QGuiApplication.clipboard().setText(self.controller.history.export_text(self.controller.chats.current))
            self.status.showMessage("Conversation copied", 3000)

    def apply_appearance(self) -> None:
        """The settings' theme and font size, for the whole application."""
        apply_theme(QGuiApplication.instance(), self.settings.theme, self.settings.font_size)

    def closeEvent(self, event) -> None:
        """Shuts down in an explicit order: dialogs and their threads, timers, then the controller (its
        reply, the engine thread, settings, history), so nothing is deleted while another object uses it."""
        self._save_geometry()
        self.dialogs.close()
        self.models.shutdown()
        self.model_panel.memory_timer.stop()
        self.notes.undo_timer.stop()
        self.controller.shutdown()
        super().closeEvent(event)
