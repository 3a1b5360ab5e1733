"""A dialog that fits the screen it opens on, at any font size: its pages scroll instead of growing it.

A dialog's smallest size is the sum of its rows' smallest heights; at font size 15 the Settings dialog
needed 1054x809 on a 1280x720 screen, so OK and Cancel lay below the screen's edge (found in a
real-window session). Each page goes in a `Page` (a scroll area that asks for its page's whole size,
so a dialog that fits looks as it did), and `fit_to_screen` sizes the dialog to that, bounded by the
screen's free area less the window frame.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget

FRAME_GUESS = QSize(16, 40)  # a title bar and borders, when there is no shown window to measure


class _Sheet(QWidget):
    """What a Page scrolls: the page, which may shrink to its smallest height before it scrolls. (For a
    page with wrapped text QScrollArea asks the height for the width, and a layout answers with its
    preferred height: the MCP servers page scrolled at the default font while its lists could shrink.)"""

    def __init__(self, page: QWidget):
        super().__init__()
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(page)

    def heightForWidth(self, width: int) -> int:
        return self.layout().totalMinimumHeightForWidth(width)


class Page(QScrollArea):
    """One page of a dialog; it scrolls when the dialog is smaller than the page's smallest size."""

    def __init__(self, page: QWidget, parent=None):
        super().__init__(parent)
        self.page = page
        self.setWidget(_Sheet(page))
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)

    def sizeHint(self) -> QSize:
        """The page's whole size (QScrollArea's own hint stops at 36x24 lines, which would shrink a dialog
        that fits)."""
        return self.page.sizeHint().expandedTo(self.page.minimumSizeHint())


def frame_extra(window: QWidget | None) -> QSize:
    """What a window frame adds around the inside: measured on `window` when it is shown, else a guess."""
    if window is not None and window.isVisible():
        frame, inside = window.frameGeometry(), window.geometry()
        extra = QSize(frame.width() - inside.width(), frame.height() - inside.height())
        if extra.height() > 0:
            return extra
    return FRAME_GUESS


def fit_to_screen(dialog: QWidget, parent: QWidget | None) -> None:
    """Sizes `dialog` to what it asks for, bounded by the free area of the screen it opens on (its
    parent's) less the frame."""
    screen = (parent.screen() if parent is not None else None) or QGuiApplication.primaryScreen()
    if screen is None:
        return
    room = screen.availableGeometry().size() - frame_extra(parent)
    dialog.resize(dialog.sizeHint().boundedTo(room).expandedTo(dialog.minimumSizeHint().boundedTo(room)))
