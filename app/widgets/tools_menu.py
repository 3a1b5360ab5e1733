"""The chat's tools switch, beside the input: which tools this chat offers the model at all.

A button with a menu: "Offer tools in this chat", then each running server's tools (checked: offered)
and a line for each approved server not running (starting, or why not), then "MCP servers…" (Settings).
A dumb view: it asks `state()` for (on, off, tools, waiting) when it opens and
says what the user chose through `sig_changed(on, off)`; the controller saves it with the chat.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QToolButton

from runtime.api import for_approval


class ToolsButton(QToolButton):
    sig_changed = Signal(bool, object)  # tools on, the set of tool names left out
    sig_manage = Signal()

    def __init__(self, state, parent=None):
        """`state()` -> (tools on, names left out, the running servers' tools: runtime.mcp.client.McpTool,
        a line for each approved server that is not running)."""
        super().__init__(parent)
        self.state = state
        self.setText("Tools")
        self.setObjectName("toolsButton")
        self.setToolTip("Which tools this chat offers the model (every call still asks you first)")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.menu_.aboutToShow.connect(self._build)
        self.setMenu(self.menu_)
        self.refresh()

    def refresh(self) -> None:
        on, off, tools, _ = self.state()
        offered = [t for t in tools if t.name not in off] if on else []
        self.setText(f"Tools ({len(offered)})" if on and tools else "Tools: off" if not on else "Tools")

    def _build(self) -> None:
        self.menu_.clear()
        on, off, tools, waiting = self.state()
        switch = self.menu_.addAction("Offer tools in this chat")
        switch.setCheckable(True)
        switch.setChecked(on)
        switch.toggled.connect(lambda checked: self._changed(checked, off))
        self.menu_.addSeparator()
        if not tools and not waiting:
            self.menu_.addAction("No server is running: approve one in MCP servers…").setEnabled(False)
        for line in waiting:
            self.menu_.addAction(for_approval(line)).setEnabled(False)
        for tool in tools:
            action = self.menu_.addAction(f"{for_approval(tool.name)}  ({for_approval(tool.server)})")
            action.setCheckable(True)
            action.setChecked(tool.name not in off)
            action.setEnabled(on)
            action.setToolTip(for_approval(tool.description))
            action.toggled.connect(lambda checked, name=tool.name: self._changed(
                on, (off - {name}) if checked else (off | {name})))
        self.menu_.addSeparator()
        self.menu_.addAction("MCP servers…").triggered.connect(self.sig_manage.emit)

    def _changed(self, on: bool, off: set) -> None:
        self.sig_changed.emit(on, set(off))
        self.refresh()
