"""The main window: conversations, the reasoning-depth slider, the live strip, the chat and
the input. Layout and wiring only: app state lives in ChatController, which the window never
outlives and whose signals it only forwards to the widgets."""

from __future__ import annotations

from pathlib import Path

import psutil
from PySide6.QtCore import QRect, QSize, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from runtime.units import format_bytes

from .controller import ChatController
from .demo_banner import demo_banner
from .models_controller import ModelsController
from .state.settings import Settings
from .state.window_state import WindowState, place
from .theme import apply_theme
from .widgets.attachment_row import AttachmentRow
from .widgets.banner import Banner
from .widgets.chat_view import ChatView
from .widgets.context_meter import ContextMeter
from .widgets.depth_slider import DepthSlider, slider_stops
from .widgets.live_strip import LiveStrip
from .widgets.load_progress import LoadProgress
from .widgets.model_manager import ModelManager
from .widgets.model_picker import ModelPicker
from .widgets.prompt_presets import PromptPresets
from .widgets.settings_dialog import SettingsDialog
from .widgets.sidebar import Sidebar

MARKDOWN_FILES, JSON_FILES = "Markdown, to read (*.md)", "JSON, to import elsewhere (*.json)"
ANSWER_NOW_KEY, THINK_LONGER_KEY = "Ctrl+Shift+A", "Ctrl+Shift+L"  # only while a reply thinks
SHORTCUTS = [("Enter", "send the message"), ("Shift+Enter", "new line in the message"),
             ("Ctrl+Enter", "send the message"), ("Esc", "stop the reply, or cancel editing a sent message"),
             (ANSWER_NOW_KEY, "answer now: end the reply's thinking at once"),
             (THINK_LONGER_KEY, "think longer: give the reply's thinking more budget"),
             ("Ctrl+N", "new chat (and the cursor in the message box)"), ("Tab", "leave the message box"),
             ("F2", "rename the selected chat"), ("Del", "delete the selected chat (with undo)"),
             ("Ctrl+Shift+M", "model manager"), ("Ctrl+,", "settings"), ("Ctrl+Q", "quit")]


def _warm_imports() -> None:
    """Does, before the window is interactive, the one-time work worker threads would otherwise do
    while it is: importing (on a cold start, compiling) big modules and building the hub client.
    Either holds the interpreter long enough to stall the GUI for a fraction of a second."""
    import huggingface_hub.hf_api

    import runtime.store.download.transfer  # noqa: F401
    import runtime.store.model_store  # noqa: F401
    import runtime.store.planner  # noqa: F401

    huggingface_hub.hf_api.get_session()  # its TLS context loads the CA bundle, which blocks the interpreter


class InputBox(QPlainTextEdit):
    """Enter (or Ctrl+Enter) sends; Shift+Enter makes a new line; Tab moves on to the next control.

    As tall as its text, from MIN_LINES to MAX_LINES lines (then it scrolls): the chat above keeps the
    rest of the window, so a short window or a large font still shows the conversation."""

    MIN_LINES, MAX_LINES = 2, 6

    def __init__(self, on_send):
        super().__init__()
        self.on_send = on_send
        self.setPlaceholderText("Message (Enter to send, Shift+Enter for a new line, Esc to stop)")
        self.setTabChangesFocus(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().documentLayout().documentSizeChanged.connect(lambda _: self.updateGeometry())

    def _height(self, lines: int) -> int:
        margin = 2 * (self.frameWidth() + round(self.document().documentMargin())) + 2
        return lines * self.fontMetrics().lineSpacing() + margin

    def sizeHint(self) -> QSize:  # noqa: N802
        lines = round(self.document().size().height())  # in lines, wrapped ones too (QPlainTextDocumentLayout)
        return QSize(super().sizeHint().width(), self._height(max(self.MIN_LINES, min(self.MAX_LINES, lines))))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(super().minimumSizeHint().width(), self._height(self.MIN_LINES))

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and \
                not event.modifiers() & (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.AltModifier):
            self.on_send()
            return
        super().keyPressEvent(event)


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
        self.models.sig_use.connect(self._use_model)
        _warm_imports()
        self.controller = ChatController(data_dir, settings, settings_path, probe_file)
        self.manager: ModelManager | None = None
        self.shortcuts_dialog: QMessageBox | None = None
        self.consents: dict = {}  # request id -> its open tool-consent dialog
        self._build()
        self._menus()
        self._connect()
        self._restore_geometry()
        self.controller.ensure_conversation()
        held = self._load_initial(checkpoint)
        self.models.refresh()  # the picker's list of models on this PC (in a worker thread)
        self.memory_timer = QTimer(self)
        self.memory_timer.timeout.connect(self._show_memory)
        self.memory_timer.start(2000)
        if settings.problem:
            self.show_error(settings.problem)
        if self.controller.interrupted:
            notice = (notice + " " if notice else "") + \
                (f"{self.controller.interrupted} reply(ies) it was writing are marked “interrupted”.")
        notice = " ".join(part for part in (notice, held) if part)
        if notice:
            self.show_error(notice, kind="banner")

    @property
    def loaded(self):
        return self.controller.loaded

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        """On the left the model picker, the prompt presets and the chats; on the right, top to bottom: the
        banner, the error line with its offers, the depth and buttons, the live strip, the chat, the files
        attached, the input (the context meter under it) with its buttons. What is added goes where there
        is room (the left column, the input's row), so the chat keeps its height at a large font."""
        self.sidebar = Sidebar()
        self.picker = ModelPicker()
        self.prompts = PromptPresets()
        left = QWidget()
        side = QVBoxLayout(left)
        side.setContentsMargins(0, 0, 0, 0)
        side.addWidget(self.picker)
        side.addWidget(self.prompts)
        side.addWidget(self.sidebar, 1)
        right = QWidget()
        column = QVBoxLayout(right)
        column.setContentsMargins(8, 8, 8, 8)
        self.banner = Banner("banner")
        column.addWidget(self.banner)
        column.addLayout(self._build_notes())
        column.addLayout(self._build_top())
        self.strip = LiveStrip()
        self.loading = LoadProgress()
        self.chat = ChatView()
        column.addWidget(self.strip)
        column.addWidget(self.loading)
        column.addWidget(self.chat, 1)
        self.files = AttachmentRow()
        column.addWidget(self.files)
        column.addLayout(self._build_inputs())
        self.split = QSplitter()
        self.split.addWidget(left)
        self.split.addWidget(right)
        self.split.setStretchFactor(1, 1)
        self.split.setChildrenCollapsible(False)
        self.setCentralWidget(self.split)
        self.status = self.statusBar()
        self.setTabOrder(self.input, self.send_button)

    def _build_notes(self) -> QHBoxLayout:
        """The error line, with its offers: a lower depth (a reply ran out of memory), undo (a chat deleted),
        and for a chat longer than the context: leave out its earliest turns, take the message back."""
        self.error = Banner("errorBanner")
        self.error.sig_closed.connect(self.hide_error)  # its offers go with it
        self.lower_depth = QPushButton("")
        self.lower_depth.setVisible(False)
        self.lower_depth.clicked.connect(self._use_lower_depth)
        self.leave_out = QPushButton("Leave out earliest turns")
        self.leave_out.setToolTip("Answer with the earliest turns of this chat left out (the system prompt stays)")
        self.take_back = QPushButton("Take message back")
        self.take_back.setToolTip("Remove your last message from the chat and put its text back in the message box")
        for b in (self.leave_out, self.take_back):
            b.setVisible(False)
        self.leave_out.clicked.connect(self._leave_out)
        self.take_back.clicked.connect(self._take_back)
        self.undo = QPushButton("Undo")
        self.undo.setVisible(False)
        self.undo.clicked.connect(self.undo_delete)
        self.use_port = QPushButton("")  # the server's port is taken: move it to a nearby free one
        self.use_port.setVisible(False)
        self.use_port.clicked.connect(self._use_free_port)
        self.retry_load = QPushButton("Try again")  # a remembered model that failed or crashed loading last time
        self.retry_load.setVisible(False)
        self.retry_load.clicked.connect(self._retry_load)
        self.held_model = ""
        self.deleted: list[tuple[int, str]] = []  # chats deleted lately, oldest first: Undo restores the newest
        self._presets_problem = ""  # the presets file's last problem shown
        self._server_error = ""  # the local server's last failure shown in the banner
        self.undo_timer = QTimer(self)  # owned by the window: it dies with it
        self.undo_timer.setSingleShot(True)
        self.undo_timer.setInterval(15000)
        self.undo_timer.timeout.connect(self._undo_expired)
        notes = QHBoxLayout()
        notes.addWidget(self.error, 1)
        notes.addWidget(self.lower_depth)
        notes.addWidget(self.leave_out)
        notes.addWidget(self.take_back)
        notes.addWidget(self.undo)
        notes.addWidget(self.use_port)
        notes.addWidget(self.retry_load)
        return notes

    def _build_top(self) -> QHBoxLayout:
        """The depth slider, with the model manager and settings buttons beside it."""
        top = QHBoxLayout()
        self.depth = DepthSlider()
        top.addWidget(self.depth, 1)
        # short texts: beside six depth levels they must fit 1280 px at the largest font (test_window_size)
        self.manager_button = QPushButton("Models")
        self.manager_button.setToolTip("Open the model manager: download, verify, choose a checkpoint (File menu)")
        self.settings_button = QPushButton("Settings")
        side = QVBoxLayout()
        side.addWidget(self.manager_button)
        side.addWidget(self.settings_button)
        top.addLayout(side)
        return top

    def _build_inputs(self) -> QHBoxLayout:
        """The input box; beside it the steering buttons (enabled only while a reply thinks) and send/stop."""
        self.input = InputBox(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Send (Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the reply (Esc)")
        self.stop_button.setEnabled(False)
        self.cancel_edit_button = QPushButton("Cancel edit")
        self.cancel_edit_button.setToolTip("Keep the sent message as it was (Esc)")
        self.cancel_edit_button.setVisible(False)
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip("Attach text, code or PDF files as context for your message (the model "
                                      "reads text; pictures are refused)")
        # Steering the thought in flight: shown always (so they can be found), enabled only while it thinks.
        self.answer_now_button = QPushButton("Answer now")
        self.answer_now_button.setToolTip(f"End the thinking at once and answer ({ANSWER_NOW_KEY}); "
                                          "only while a reply is thinking")
        self.think_longer_button = QPushButton("Think longer")
        self.answer_now_button.setEnabled(False)
        self.think_longer_button.setEnabled(False)
        steer = QVBoxLayout()
        steer.addWidget(self.answer_now_button)
        steer.addWidget(self.think_longer_button)
        steer.addStretch()
        from .widgets.tools_menu import ToolsButton

        c = self.controller
        self.tools_button = ToolsButton(lambda: (*c.chat_tools(), c.tools.known_tools(), c.tools.waiting_servers()))
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.cancel_edit_button)
        buttons.addStretch()
        inputs = QHBoxLayout()
        self.meter = ContextMeter()
        self.meter.set_policy(self.settings.context_overflow)
        under = QHBoxLayout()  # under the box, so the row is no taller than its buttons at any font
        under.addWidget(self.meter, 1)
        under.addWidget(self.tools_button)  # beside Attach, not above the steering: the row fits 720 px at 28 pt
        under.addWidget(self.attach_button)
        box = QVBoxLayout()
        box.addWidget(self.input, 1)
        box.addLayout(under)
        inputs.addLayout(box, 1)
        inputs.addLayout(steer)
        inputs.addLayout(buttons)
        return inputs

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if tip:
            action.setStatusTip(tip)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _menus(self) -> None:
        c = self.controller
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self._action(file, "&Model manager…", self.open_manager, "Ctrl+Shift+M", "Download, verify and choose models")
        self._action(file, "&Settings…", lambda: self.open_settings(tab=0), "Ctrl+,")
        file.addSeparator()
        self._action(file, "&Quit", self.close, "Ctrl+Q")
        chat = bar.addMenu("&Chat")
        self.new_action = self._action(chat, "&New chat", self.new_chat, "Ctrl+N")
        self.stop_action = self._action(chat, "&Stop the reply / cancel the edit", self.escape, Qt.Key.Key_Escape)
        self.answer_now_action = self._action(chat, "&Answer now", self.answer_now, ANSWER_NOW_KEY,
                                              "End the reply's thinking at once and answer")
        self.think_longer_action = self._action(chat, "Think &longer", self.think_longer, THINK_LONGER_KEY,
                                                "Give the reply's thinking more budget")
        self.answer_now_action.setEnabled(False)
        self.think_longer_action.setEnabled(False)
        self._action(chat, "&Regenerate the last reply", c.regenerate)
        self._action(chat, "&Copy conversation", self.copy_conversation)
        self._action(chat, "&Export chat…", self.export_chat, tip="Save this chat as Markdown (to read) or JSON "
                     "(to import on another machine, with every version and the reply details)")
        self._action(chat, "&Import chat…", self.import_chat, tip="Add a chat exported as JSON")
        self._action(chat, "Chat se&ttings…", lambda: self.open_settings(tab=1))
        help_ = bar.addMenu("&Help")
        self._action(help_, "&Keyboard shortcuts", self.show_shortcuts, QKeySequence.StandardKey.HelpContents)
        self._action(help_, "&About Elastic Chat", self.show_about)

    def _connect(self) -> None:
        c = self.controller
        self.sidebar.sig_new.connect(self.new_chat)
        self.sidebar.sig_select.connect(c.select)
        self.sidebar.sig_rename.connect(c.rename)
        self.sidebar.sig_delete.connect(self.confirm_delete)
        self.sidebar.sig_search.connect(c.refresh_conversations)
        self.send_button.clicked.connect(self.send)
        self.stop_button.clicked.connect(c.stop_shown)
        self.answer_now_button.clicked.connect(self.answer_now)
        self.think_longer_button.clicked.connect(self.think_longer)
        self.cancel_edit_button.clicked.connect(self.cancel_edit)
        self.manager_button.clicked.connect(self.open_manager)
        self.settings_button.clicked.connect(lambda: self.open_settings(tab=0))
        self.depth.sig_changed.connect(c.set_depth)
        self.chat.sig_edit.connect(self.start_edit)
        self.chat.sig_regenerate.connect(c.regenerate)
        self.chat.sig_version.connect(c.show_version)
        c.sig_conversations.connect(self.sidebar.set_conversations)
        c.sig_chat_shown.connect(self.chat.show_chat)
        c.sig_messages_added.connect(self.chat.append)
        c.sig_stream.connect(self.chat.stream)
        c.sig_reply_done.connect(self.chat.finish)
        c.sig_reply_started.connect(self._reply_started)
        c.sig_token.connect(self.strip.on_token)
        c.sig_switch.connect(self.strip.on_switch)
        c.sig_done.connect(self.strip.on_done)
        c.sig_error.connect(self.show_error)
        c.sig_notice.connect(lambda text: self.show_error(text, kind="banner"))
        c.sig_model_loaded.connect(self._model_loaded)
        c.sig_model_failed.connect(self._model_failed)
        c.sig_model_unloaded.connect(self._model_unloaded)
        self.models.sig_inventory.connect(self._inventory)
        self.picker.sig_load.connect(self.models.use)
        self.picker.sig_unload.connect(c.unload_model)
        self.prompts.sig_chosen.connect(self._preset_chosen)
        self.prompts.sig_save.connect(self.save_preset)
        c.sig_load_progress.connect(self.loading.update_progress)
        c.sig_load_cancelled.connect(self._load_cancelled)
        self.loading.sig_cancel.connect(c.cancel_load)
        c.sig_deleted.connect(self._deleted)
        c.sig_editing.connect(self._editing)
        c.sig_depth.connect(self._depth)
        c.server.sig_status.connect(self._server_status)
        c.sig_live_phase.connect(self._live_phase)
        c.sig_tool_rounds.connect(self.chat.tool_rounds)
        c.sig_consent.connect(self.ask_consent)
        c.tools.sig_consent_ended.connect(self._consent_ended)
        c.sig_chat_shown.connect(lambda *_: self.tools_button.refresh())
        c.tools.sig_servers.connect(self.tools_button.refresh)
        self.tools_button.sig_changed.connect(c.set_chat_tools)
        self.tools_button.sig_manage.connect(lambda: self.open_settings(tab=self.MCP_TAB))
        c.sig_context.connect(self.meter.show_count)
        c.sig_attachments.connect(self.files.show_files)
        self.files.sig_remove.connect(c.detach)
        self.attach_button.clicked.connect(self.attach_files)
        c.sig_overflow.connect(self._overflow)
        c.sig_take_back.connect(self.input.setPlainText)
        c.sig_chat_shown.connect(self._chat_shown)
        self.input.textChanged.connect(self._draft_changed)

    # ------------------------------------------------------------------ window state

    def _restore_geometry(self) -> None:
        """Last session's frame and sidebar width, fitted onto the screens there are now (window_state.place)."""
        s = WindowState.load(self.data_dir)
        width = restore_frame(self, s)
        self.split.setSizes([min(s.sidebar, width // 2), max(200, width - s.sidebar)])

    def _save_geometry(self) -> None:
        """The frame the user left: its corner (frameGeometry), the inside's size (geometry), what the frame adds."""
        x, y, width, height, frame_width, frame_height = frame_of(self)
        WindowState(x, y, width, height, self.isMaximized(), self.split.sizes()[0], frame_width,
                    frame_height).save(self.data_dir)

    # ------------------------------------------------------------------ model

    def _load_initial(self, checkpoint: str | None) -> str:
        """Loads the model asked for, the remembered one, or the demo; returns a notice for the banner."""
        from runtime.store.catalog import load_catalog
        from runtime.store.remote_sources import is_spec  # a server added in the model manager

        demo = next(v.path for v in load_catalog().variants if v.bundled)
        folder = checkpoint or self.settings.active_model
        if folder and not is_spec(folder) and not (Path(folder) / "config.json").exists():
            self.show_error(f"The model folder {folder} is gone; the offline demo is loaded instead. "
                            "Pick another model in the model manager.")
            folder = ""
        why = self.controller.load_record.blocked(folder) if folder and not checkpoint else ""
        if why:  # asked for on the command line, it loads; remembered, it waits for the user
            self.held_model, folder = folder, ""
        self.load_model(folder or str(demo), "", is_demo=not folder)
        if why:
            self.retry_load.setToolTip(f"Load {self.held_model} again")
            self.retry_load.setVisible(True)
            return (f"{Path(self.held_model).name} was not loaded, because {why}. The demo is loaded instead; "
                    "Try again loads it, or choose another model in the model manager.")
        return ""

    def _retry_load(self) -> None:
        self.retry_load.setVisible(False)
        self.error.setVisible(False)
        self.controller.load_record.clear()
        self.load_model(self.held_model, "")

    def load_model(self, folder: str, resident: str, is_demo: bool = False) -> None:
        self.status.showMessage(f"Loading {folder}…")
        self._set_loading(Path(folder).name)
        self.controller.load_model(folder, resident, is_demo)

    def _set_loading(self, name: str | None) -> None:
        """While model `name` loads, Send and the depth slider wait for it (and say so); None: it ended."""
        why = f"Waiting for {name} to load" if name else ""
        for w, tip in ((self.send_button, "Send (Enter)"), (self.depth, "")):
            w.setEnabled(name is None)
            w.setToolTip(why or tip)
        if name:
            self.loading.start(name)
        else:
            self.loading.finish()

    @Slot(object)
    def _model_loaded(self, loaded) -> None:
        self.depth.set_stops(slider_stops(loaded.levels, dict(loaded.reasons)), self.controller.depth)
        self.strip.set_submodels(loaded.submodels)
        path = f"{loaded.status.compute_path} · decode: {loaded.status.decode_path}"
        placement = getattr(loaded.status, "placement", "")  # a remote model's status has none
        if "RAM" in placement:  # routed experts in RAM: say where each part lives
            path += f" · {placement}"
        self.strip.set_path("CPU demo · " + path if loaded.is_demo else path)
        self.models.set_active(loaded.folder)
        self.picker.set_loaded(loaded.folder, loaded.name, loaded.loaded, loaded.submodels)
        self.strip.set_badge(loaded.loaded[-1])
        self.think_longer_button.setToolTip(f"Give the thinking {self.controller.think_longer_tokens} more tokens "
                                            f"of budget ({THINK_LONGER_KEY}); only while a reply is thinking")
        self.banner.setText(demo_banner(loaded.folder, loaded.default_depth))
        self.banner.setVisible(loaded.is_demo)
        self._set_loading(None)
        in_memory = ", ".join(loaded.loaded)
        from runtime.store.remote_sources import is_spec

        where = "served" if is_spec(loaded.folder) else "in memory"  # a server's model is not on this PC
        self.status.showMessage(f"{loaded.name}: {in_memory} {where}; {loaded.status.compute_path}")
        self._show_memory()

    @Slot(object)
    def _inventory(self, inventory) -> None:
        self.picker.set_models(inventory.rows)

    @Slot()
    def _model_unloaded(self) -> None:
        self.send_button.setEnabled(False)
        self.send_button.setToolTip("No model is loaded: choose one beside “Model”")
        self.picker.set_loaded("", "", (), ())
        self.models.set_active("")
        self.status.showMessage("The model was unloaded: its memory is free. Choose a model to load one again")
        self._show_memory()

    @Slot()
    def _load_cancelled(self) -> None:
        self._set_loading(None)
        self.send_button.setEnabled(False)
        self.status.showMessage("Loading cancelled: no model is loaded; choose one in the model manager")

    @Slot(str)
    def _model_failed(self, message: str) -> None:
        self._set_loading(None)
        self.send_button.setEnabled(False)
        self.status.showMessage("No model loaded")
        self.show_error(f"The model could not be loaded: {message}. Open the model manager to verify it, "
                        "or choose another one.")

    # ------------------------------------------------------------------ chat

    def send(self) -> None:
        if self.controller.send(self.input.toPlainText()):
            self.input.clear()
            self.hide_error()

    def _draft_changed(self) -> None:
        self.controller.set_draft(self.input.toPlainText())

    @Slot(int, object, object)
    def _chat_shown(self, cid: int, _messages, _streaming) -> None:
        """Each chat keeps its own draft: the box shows the one of the chat shown (not while editing); the
        live strip starts over for it (a reply streaming there fills it again from its next token)."""
        self._show_presets()
        if self.controller.reply_in(cid) is None:
            self.strip.clear()
        if self.controller.editing is None and self.input.toPlainText() != self.controller.draft(cid):
            self.input.setPlainText(self.controller.draft(cid))

    def _show_presets(self) -> None:
        from .state.presets import BUILT_IN, load_presets

        own, problem = load_presets(self.data_dir)
        if problem and problem != self._presets_problem:
            self.show_error(problem, kind="banner")
        self._presets_problem = problem
        prompt = self.controller.conversation_settings()[0] if self.controller.current is not None else ""
        self.prompts.show_presets({**BUILT_IN, **own}, prompt)

    def _preset_chosen(self, prompt: str) -> None:
        self.controller.set_system_prompt(prompt)
        self._show_presets()
        self.status.showMessage("The chat's system prompt is set: it applies from the next reply", 4000)

    def save_preset(self) -> None:
        from PySide6.QtWidgets import QInputDialog

        from .state.presets import check_preset, load_presets, save_presets

        prompt = self.controller.conversation_settings()[0] if self.controller.current is not None else ""
        name, ok = QInputDialog.getText(self, "Save the system prompt", "A name for this chat's system prompt:")
        if ok:
            problem = check_preset(name, prompt)
            own, _ = load_presets(self.data_dir)
            problem = problem or save_presets(self.data_dir, {**own, name.strip(): prompt})
            if problem:
                self.show_error(problem)
        self._show_presets()

    @Slot(str, bool)
    def _overflow(self, message: str, trimmable: bool) -> None:
        self.strip.clear()  # no reply ran
        self.show_error(message)
        self.leave_out.setVisible(trimmable)
        self.take_back.setVisible(True)

    def _leave_out(self) -> None:
        self.hide_error()
        self.controller.send_leaving_out()

    def _take_back(self) -> None:
        self.hide_error()
        self.controller.take_back()
        self.input.setFocus()

    def hide_error(self) -> None:
        for w in (self.error, self.lower_depth, self.leave_out, self.take_back, self.use_port):
            w.setVisible(False)

    def new_chat(self) -> None:
        self.controller.new_conversation()
        self.input.setFocus()

    def escape(self) -> None:
        """Esc: cancels an edit when there is one, else stops the reply."""
        if self.controller.editing is not None:
            self.cancel_edit()
        else:
            self.controller.stop_shown()

    def start_edit(self, message_id: int) -> None:
        text = self.controller.begin_edit(message_id)
        if text is not None:
            self.input.setPlainText(text)
            self.input.setFocus()

    def cancel_edit(self) -> None:
        self.controller.cancel_edit()
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
        if cid != self.controller.current:
            return  # the strip shows the chat on screen
        self.strip.reset()
        self.strip.set_badge(submodel, phase)  # the submodel about to work, during the time to first token

    @Slot(str)
    def _live_phase(self, phase: str) -> None:
        """The reply shown thinks ("thinking"), answers, or there is none: what steering can do now."""
        thinking = phase == "thinking"
        self.stop_button.setEnabled(bool(phase))  # a reply streams in the chat shown
        for w in (self.answer_now_button, self.think_longer_button, self.answer_now_action, self.think_longer_action):
            w.setEnabled(thinking)
        self.depth.set_live(phase)

    def answer_now(self) -> None:
        if self.controller.answer_now():
            self.status.showMessage("Answering now: the thinking ends at the next token", 4000)

    def think_longer(self) -> None:
        tokens = self.controller.think_longer()
        if tokens:
            self.status.showMessage(f"Thinking longer: {tokens} more tokens of budget", 4000)

    @Slot(str)
    def _depth(self, name: str) -> None:
        if self.depth.stops and self.depth.selected != name:
            self.depth.set_stops(self.depth.stops, name)

    @Slot(object)
    def _server_status(self, status) -> None:
        """The live strip's server label; a failure to serve also goes to the banner (once each), which
        goes away when the server runs or is turned off."""
        self.strip.set_server(status.summary)
        if status.error and status.error != self._server_error:
            instead = f"Use port {status.free_port}, or change" if status.free_port else "Change"
            self.show_error(f"The local server is not running: {status.error}. {instead} its address or port "
                            "in Settings → Server, or turn it off there.")
            if status.free_port:
                self.use_port.setText(f"Use port {status.free_port}")
                self.use_port.setToolTip(f"Serve on port {status.free_port} instead (saved in Settings → Server); "
                                         "programs that use the server must be told the new address")
                self.use_port.setProperty("port", status.free_port)
                self.use_port.setVisible(True)
        elif not status.error and self._server_error and self.error.text().startswith("The local server "):
            self.hide_error()
        self._server_error = status.error

    def _use_free_port(self) -> None:
        """The banner's offer when the port was taken: serve on the free one found, and keep it."""
        port = self.use_port.property("port")
        self.hide_error()
        if port:
            self.settings.server_port = int(port)
            self.controller.save_settings()
            self.controller.apply_server_settings()

    def copy_conversation(self) -> None:
        if self.controller.current is not None:
            QGuiApplication.clipboard().setText(self.controller.history.export_text(self.controller.current))
            self.status.showMessage("Conversation copied", 3000)

    def export_chat(self) -> None:
        c = self.controller
        if c.current is None:
            return
        title = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in c.history.conversation(c.current).title)
        suggested = str(Path.home() / f"{title.strip() or 'chat'}.md")
        path, kind = QFileDialog.getSaveFileName(self, "Export chat", suggested, f"{MARKDOWN_FILES};;{JSON_FILES}")
        if path:
            as_json = path.lower().endswith(".json") or (kind == JSON_FILES and not path.lower().endswith(".md"))
            if as_json and not path.lower().endswith(".json"):
                path += ".json"
            c.export_chat(path, as_json)

    def attach_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", str(Path.home()),
                                                "Text, code and PDF files (*);;PDF files (*.pdf)")
        for path in paths:
            self.controller.attach(path)

    def import_chat(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import chat", str(Path.home()),
                                              "Chats exported as JSON (*.json);;All files (*)")
        if path:
            self.controller.import_chat(path)

    # ------------------------------------------------------------------ conversations

    def confirm_delete(self, cid: int) -> None:
        title = self.controller.history.conversation(cid).title
        if QMessageBox.question(self, "Delete chat", f"Delete “{title}”? You can undo right after.") == \
                QMessageBox.StandardButton.Yes:
            self.controller.delete(cid)

    @Slot(int, str)
    def _deleted(self, cid: int, title: str) -> None:
        self.deleted.append((cid, title))
        self._offer_undo(f"Deleted “{title}”.")

    def _offer_undo(self, said: str) -> None:
        n = len(self.deleted)
        more = f" Undo brings back {n} deleted chats, newest first." if n > 1 else ""
        self.show_error(said + more, kind="banner")
        self.undo.setText("Undo" if n == 1 else f"Undo ({n})")
        self.undo.setVisible(True)
        self.undo_timer.start()

    def undo_delete(self) -> None:
        if self.deleted:
            cid, title = self.deleted.pop()
            self.controller.undelete(cid)
            if self.deleted:
                self._offer_undo(f"Restored “{title}”.")
                return
        self.undo.setVisible(False)
        self.error.setVisible(False)

    def _undo_expired(self) -> None:
        self.deleted.clear()
        self.undo.hide()

    def show_error(self, message: str, lower: str = "", kind: str = "error") -> None:
        """The banner above the chat; `lower` is a depth stop the controller offers (out of memory)."""
        self.error.setObjectName("errorBanner" if kind == "error" else "banner")
        self.error.style().unpolish(self.error)  # the object name picks the theme's style: re-apply it
        self.error.style().polish(self.error)
        self.error.setText(message)
        self.error.setVisible(True)
        self.lower_depth.setVisible(bool(lower))
        self.leave_out.setVisible(False)
        self.take_back.setVisible(False)
        self.use_port.setVisible(False)
        if lower:
            self.lower_depth.setText(f"Use {lower}")
            self.lower_depth.setToolTip(f"Switch the reasoning depth to {lower}, which needs less memory")

    def _use_lower_depth(self) -> None:
        lower = self.controller.lower_level()
        if lower:
            self.controller.set_depth(lower)
        self.lower_depth.setVisible(False)
        self.error.setVisible(False)

    # ------------------------------------------------------------------ panels and help

    def open_manager(self) -> None:
        if self.manager is None:
            self.manager = ModelManager(self, models=self.models)  # "Use" reaches the window through self.models
        self.manager.show()
        self.manager.raise_()

    def _use_model(self, folder: str, resident: str) -> None:
        from runtime.store.catalog import load_catalog

        demo = next(v.path for v in load_catalog().variants if v.bundled)
        is_demo = Path(folder).resolve() == Path(demo).resolve()
        self.settings.active_model = "" if is_demo else folder
        self.controller.save_settings()
        self.retry_load.setVisible(False)  # another choice: the model held at start is no longer offered
        self.load_model(folder, resident, is_demo)

    MCP_TAB = 3  # the Settings dialog's "MCP servers" tab

    def ask_consent(self, request_id: int, call, box) -> None:
        """A tool call waits for the user's consent: the dialog (window-modal, never blocking the window's
        thread); its one answer goes back to the waiting reply."""
        from .widgets.tool_consent import ToolConsentDialog

        dialog = ToolConsentDialog(self, call)
        dialog.sig_decided.connect(lambda answer: self.controller.tools.answered(request_id, box, answer))
        dialog.finished.connect(dialog.deleteLater)
        self.consents[request_id] = dialog
        dialog.finished.connect(lambda _: self.consents.pop(request_id, None))
        dialog.open()

    def _consent_ended(self, request_id: int) -> None:
        """The reply stopped or ended while its dialog was open: the dialog goes (its call is declined)."""
        dialog = self.consents.pop(request_id, None)
        if dialog is not None:
            dialog.reject()

    def open_settings(self, tab: int = 0) -> None:
        dialog = SettingsDialog(self, self.settings, *self.controller.conversation_settings(),
                                server_address=self.controller.server.status().address, tools=self.controller.tools,
                                context_ceiling=self.loaded.context_ceiling if self.loaded else 0)
        dialog.tabs.setCurrentIndex(tab)
        try:
            if dialog.exec() != QDialog.DialogCode.Accepted:
                return
            before, context = self.settings.models_dir, self.settings.context
            dialog.apply(self.settings)
            conversation = dialog.conversation_values()
        finally:
            dialog.deleteLater()  # one owner, one lifetime: the dialog goes now, not with the window at exit
        self.controller.save_settings()  # now, not at quit: a kill must not lose the API key
        if self.settings.models_dir != before:
            self._set_models_dir(self.settings.models_dir)
        self.meter.set_policy(self.settings.context_overflow)
        if self.settings.context != context:
            self._reload_for_context(self.settings.context)
        self.controller.count_context()
        self.controller.set_conversation_settings(*conversation)
        self._show_presets()
        self.apply_appearance()
        self.controller.apply_server_settings()

    def _reload_for_context(self, context: int) -> None:
        """The engine's caches are allocated at the context length: a new length loads the model again."""
        self.controller.worker.max_context = context  # read by the worker's next load (queued after this)
        if self.loaded is not None:
            self.load_model(self.loaded.folder, "", self.loaded.is_demo)

    def apply_appearance(self) -> None:
        """The settings' theme and font size, for the whole application."""
        apply_theme(QGuiApplication.instance(), self.settings.theme, self.settings.font_size)

    def show_shortcuts(self) -> None:
        rows = "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>" for k, v in SHORTCUTS)
        if self.shortcuts_dialog is None:
            self.shortcuts_dialog = QMessageBox(QMessageBox.Icon.NoIcon, "Keyboard shortcuts",
                                                f"<table>{rows}</table>", QMessageBox.StandardButton.Close, self)
            self.shortcuts_dialog.setModal(False)
        self.shortcuts_dialog.show()
        self.shortcuts_dialog.raise_()

    def show_about(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("elastic-chat")
        except PackageNotFoundError:
            v = "development copy"
        QMessageBox.about(self, "About Elastic Chat",
                          f"<b>Elastic Chat</b> {v}<br>A desktop chat for NVIDIA's Star Elastic models: a smaller "
                          "nested model thinks, the full model answers, without reloading weights.<br><br>"
                          f"Chats, settings and the log (elastic-chat.log) live in {self.data_dir}.")

    def _set_models_dir(self, folder: str) -> None:
        """New downloads go to `folder`; models already downloaded stay where they are."""
        import os

        if folder:
            os.environ["ELASTIC_CHAT_MODELS"] = folder
        else:
            os.environ.pop("ELASTIC_CHAT_MODELS", None)
        self.show_error(f"Models are now kept in {folder or 'the default folder'}. Models downloaded before stay "
                        "where they were: import their folders in the model manager, or move them.", kind="banner")
        self.models.refresh()

    def _show_memory(self) -> None:
        rss = psutil.Process().memory_info().rss
        text = f"RAM {format_bytes(rss, 'MiB', 0)}"
        if self.loaded is not None and not self.loaded.is_demo:
            try:
                import torch

                if torch.cuda.is_available():
                    text = f"VRAM {format_bytes(torch.cuda.memory_allocated(), 'GiB')} · " + text
            except Exception:
                pass
        self.strip.set_memory(text)

    def closeEvent(self, event) -> None:
        """Shuts down in an explicit order: dialogs and their threads, timers, then the controller (its
        reply, the engine thread, settings, history), so nothing is deleted while another object uses it."""
        self._save_geometry()
        if self.manager is not None:
            self.manager.close()
            self.manager.deleteLater()
            self.manager = None
        self.models.shutdown()
        if self.shortcuts_dialog is not None:
            self.shortcuts_dialog.close()
        self.memory_timer.stop()
        self.undo_timer.stop()
        self.controller.shutdown()
        super().closeEvent(event)
