"""The left column (the model picker, the prompt presets and the chat list) folds away in a narrow
window, so the window fits half of a 1366x768 laptop screen (700 px) with the chat, the depth slider,
the strip and the input whole (tests/app/test_window_layout_narrow.py).

Two choices, remembered in the window state (`window.json`): whether the column shows in a wide
window (default yes) and in a narrow one (default no). Crossing NARROW_PX applies the new width's
choice; the Chats button or the Chat menu's action (Ctrl+B), which the window connects to
`toggle`, flip the current one's. Dumb about the rest of the window: it
shows or hides one widget and keeps the button and the menu action checked to match."""

from __future__ import annotations

from PySide6.QtCore import QObject

NARROW_PX = 900  # a window narrower than this (its inside) is narrow
TOGGLE_KEY = "Ctrl+B"


class SidebarFold(QObject):
    def __init__(self, column, toggles, shown_wide: bool = True, shown_narrow: bool = False, parent=None):
        """`column`: the widget that folds; `toggles`: checkable buttons and actions that show its state."""
        super().__init__(parent)
        self.column, self.toggles = column, list(toggles)
        self.shown = {False: shown_wide, True: shown_narrow}  # narrow -> the user's choice
        self.narrow: bool | None = None  # not placed yet
        for toggle in self.toggles:
            toggle.setCheckable(True)

    def fit(self, width: int) -> None:
        """The window's inside is `width` px wide: apply that width's choice when it crosses NARROW_PX."""
        narrow = width < NARROW_PX
        if narrow != self.narrow:
            self.narrow = narrow
            self._apply()

    def toggle(self) -> None:
        """The user shows or hides the column: the choice for this width changes, and is kept."""
        narrow = bool(self.narrow)
        self.shown[narrow] = not self.shown[narrow]
        self._apply()

    def is_shown(self) -> bool:
        return self.shown[bool(self.narrow)]

    def _apply(self) -> None:
        shown = self.is_shown()
        self.column.setVisible(shown)
        for toggle in self.toggles:
            toggle.blockSignals(True)
            toggle.setChecked(shown)
            toggle.blockSignals(False)
