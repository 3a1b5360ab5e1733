"""The main window's widgets and menus, built as a Designer form's setupUi builds them: each widget
becomes an attribute of the window (app/main_window.py), which wires them to the controller.

On the left the model picker, the prompt presets and the chats; on the right, top to bottom: the banner,
the notes line with its offers, the depth and buttons, the live strip, the chat, the files attached, the
input (the context meter under it) with its buttons. What is added goes where there is room (the left
column, the input's row), so the chat keeps its height at a large font.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from .sidebar_fold import NARROW_PX, TOGGLE_KEY
from .widgets.attachment_row import AttachmentRow
from .widgets.banner import Banner
from .widgets.chat_view import ChatView
from .widgets.context_meter import ContextMeter
from .widgets.depth_slider import DepthSlider
from .widgets.elided_label import ElidedLabel
from .widgets.live_strip import LiveStrip
from .widgets.load_progress import LoadProgress
from .widgets.model_picker import ModelPicker
from .widgets.notes_bar import NotesBar
from .widgets.prompt_presets import PromptPresets
from .widgets.sidebar import Sidebar

ANSWER_NOW_KEY, THINK_LONGER_KEY = "Ctrl+Shift+A", "Ctrl+Shift+L"  # only while a reply thinks
QUIT_KEY = "Ctrl+Q"  # the window's, and every dialog's too (app/window_dialogs.py: QuitFromDialogs)


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

    def sizeHint(self) -> QSize:
        lines = round(self.document().size().height())  # in lines, wrapped ones too (QPlainTextDocumentLayout)
        return QSize(super().sizeHint().width(), self._height(max(self.MIN_LINES, min(self.MAX_LINES, lines))))

    def minimumSizeHint(self) -> QSize:
        return QSize(super().minimumSizeHint().width(), self._height(self.MIN_LINES))

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and \
                not event.modifiers() & (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.AltModifier):
            self.on_send()
            return
        super().keyPressEvent(event)


def build_window(w) -> None:
    """The widgets of main window `w`, laid out."""
    w.sidebar, w.picker, w.prompts = Sidebar(), ModelPicker(), PromptPresets()
    w.left_column = left = QWidget()  # folds away in a narrow window (app/sidebar_fold.py)
    side = QVBoxLayout(left)
    side.setContentsMargins(0, 0, 0, 0)
    side.addWidget(w.picker)
    side.addWidget(w.prompts)
    side.addWidget(w.sidebar, 1)
    right = QWidget()
    column = QVBoxLayout(right)
    column.setContentsMargins(8, 8, 8, 8)
    w.banner, w.notes = Banner("banner"), NotesBar()
    w.strip, w.loading, w.chat, w.files = LiveStrip(), LoadProgress(), ChatView(), AttachmentRow()
    column.addWidget(w.banner)
    column.addWidget(w.notes)
    column.addLayout(_top(w))
    column.addWidget(w.strip)
    column.addWidget(w.loading)
    column.addWidget(w.chat, 1)
    column.addWidget(w.files)
    column.addLayout(_inputs(w))
    w.split = QSplitter()
    w.split.addWidget(left)
    w.split.addWidget(right)
    w.split.setStretchFactor(1, 1)
    w.split.setChildrenCollapsible(False)
    w.setCentralWidget(w.split)
    w.status = w.statusBar()
    # the model's line: a widget, not a passing message, so a status tip, an edit's hint or "Copied" leaves
    # it when they go (app/window_model.py sets it)
    w.model_line = ElidedLabel()
    w.status.addWidget(w.model_line, 1)
    w.setTabOrder(w.input, w.send_button)


def _top(w) -> QHBoxLayout:
    """The depth slider, with the model manager and settings buttons beside it."""
    top = QHBoxLayout()
    w.depth = DepthSlider()
    top.addWidget(w.depth, 1)
    # short texts: beside six depth levels they must fit 1280 px at the largest font (test_window_size)
    w.manager_button = QPushButton("Models")
    w.manager_button.setToolTip("Open the model manager: download, verify, choose a checkpoint (File menu)")
    w.settings_button = QPushButton("Settings")
    w.chats_button = QPushButton("Chats")
    w.chats_button.setToolTip(f"Show or hide the chat list and the model picker ({TOGGLE_KEY}); a window "
                              f"narrower than {NARROW_PX} px hides them until you show them")
    side = QVBoxLayout()
    side.addWidget(w.chats_button)
    side.addWidget(w.manager_button)
    side.addWidget(w.settings_button)
    top.addLayout(side)
    return top


def _button(text: str, tip: str, enabled: bool = True) -> QPushButton:
    b = QPushButton(text)
    b.setToolTip(tip)
    b.setEnabled(enabled)
    return b


def _column(*widgets) -> QVBoxLayout:
    column = QVBoxLayout()
    for widget in widgets:
        column.addWidget(widget)
    column.addStretch()
    return column


def _inputs(w) -> QHBoxLayout:
    """The input box; beside it the steering buttons (enabled only while a reply thinks) and send/stop."""
    from .widgets.tools_menu import ToolsButton

    w.input = InputBox(w.send)
    w.send_button = _button("Send", "Send (Enter)")
    w.stop_button = _button("Stop", "Stop the reply (Esc)", enabled=False)
    w.cancel_edit_button = _button("Cancel edit", "Keep the sent message as it was (Esc)")
    w.cancel_edit_button.setVisible(False)
    w.attach_button = _button("Attach…", "Attach text, code or PDF files as context for your message (the model "
                                         "reads text; pictures are refused)")
    # Steering the thought in flight: shown always (so they can be found), enabled only while it thinks.
    w.answer_now_button = _button("Answer now", f"End the thinking at once and answer ({ANSWER_NOW_KEY}); only "
                                                "while a reply is thinking", enabled=False)
    w.think_longer_button = _button("Think longer", "", enabled=False)
    c = w.controller
    w.tools_button = ToolsButton(lambda: (*c.chats.tool_switch(), c.tools.known_tools(), c.tools.waiting_servers()))
    w.meter = ContextMeter()
    w.meter.set_policy(w.settings.context_overflow)
    under = QHBoxLayout()  # under the box, so the row is no taller than its buttons at any font
    under.addWidget(w.meter, 1)
    under.addWidget(w.tools_button)  # beside Attach, not above the steering: the row fits 720 px at 28 pt
    under.addWidget(w.attach_button)
    box = QVBoxLayout()
    box.addWidget(w.input, 1)
    box.addLayout(under)
    inputs = QHBoxLayout()
    inputs.addLayout(box, 1)
    inputs.addLayout(_column(w.answer_now_button, w.think_longer_button))
    inputs.addLayout(_column(w.send_button, w.stop_button, w.cancel_edit_button))
    return inputs


def _action(w, menu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
    action = QAction(text, w)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    if tip:
        action.setStatusTip(tip)
    action.triggered.connect(slot)
    menu.addAction(action)
    return action


def build_menus(w) -> None:
    """The menu bar of main window `w`; the steering actions are enabled only while a reply thinks."""
    bar, dialogs = w.menuBar(), w.dialogs
    file = bar.addMenu("&File")
    _action(w, file, "&Model manager…", dialogs.open_manager, "Ctrl+Shift+M", "Download, verify and choose models")
    _action(w, file, "&Settings…", lambda: dialogs.open_settings(tab=0), "Ctrl+,")
    file.addSeparator()
    _action(w, file, "&Quit", w.close, QUIT_KEY)
    chat = bar.addMenu("&Chat")
    w.new_action = _action(w, chat, "&New chat", w.new_chat, "Ctrl+N")
    w.stop_action = _action(w, chat, "&Stop the reply / cancel the edit", w.escape, Qt.Key.Key_Escape)
    w.answer_now_action = _action(w, chat, "&Answer now", w.answer_now, ANSWER_NOW_KEY,
                                  "End the reply's thinking at once and answer")
    w.think_longer_action = _action(w, chat, "Think &longer", w.think_longer, THINK_LONGER_KEY,
                                    "Give the reply's thinking more budget")
    w.answer_now_action.setEnabled(False)
    w.think_longer_action.setEnabled(False)
    _action(w, chat, "&Regenerate the last reply", w.controller.chats.regenerate)
    _action(w, chat, "&Copy conversation", w.copy_conversation)
    _action(w, chat, "&Export chat…", dialogs.export_chat, tip="Save this chat as Markdown (to read) or JSON "
            "(to import on another machine, with every version and the reply details)")
    _action(w, chat, "&Import chat…", dialogs.import_chat, tip="Add a chat exported as JSON")
    _action(w, chat, "Chat se&ttings…", lambda: dialogs.open_settings(tab=1))
    chat.addSeparator()
    w.chats_action = _action(w, chat, "Show the chat &list", w.toggle_chats, TOGGLE_KEY,
                             "Show or hide the chat list and the model picker (folded in a narrow window)")
    help_ = bar.addMenu("&Help")
    _action(w, help_, "&Keyboard shortcuts", dialogs.show_shortcuts, QKeySequence.StandardKey.HelpContents)
    _action(w, help_, "&About Elastic Chat", dialogs.show_about)
