"""Settings' "MCP servers" page: the servers, exactly what each one runs, and the user's approvals.

Add a server (a program or a URL), import another app's mcp.json (Claude Desktop, LM Studio), see the
exact command line, approve it (it starts, and its tools are listed), revoke it, remove it, and allow
single tools always. Approving and revoking act at once (they are decisions, not preferences to OK):
the page calls app/tools_controller.py's ToolsController, which owns the file and the approvals, and
redraws from it when it says something changed. Names, commands and tools came from outside: plain text.
"""

from __future__ import annotations

import shlex

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from runtime.api import ConfigError, bundled_calculator, for_approval, one_line, parse_server, show


def _plain(text: str = "", object_name: str = "") -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setObjectName(object_name)
    label.setText(text)
    return label


class AddServerDialog(QDialog):
    """A new server: a program started with stdio, or a Streamable HTTP URL; checked as mcp.json is."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Add an MCP server")
        self.server = None
        form = QFormLayout(self)
        self.name = QLineEdit()
        self.kind = QComboBox()
        self.kind.addItems(["A program (stdio)", "A URL (Streamable HTTP)"])
        self.command = QLineEdit()
        self.command.setPlaceholderText("uvx mcp-server-calculator   (as a shell would split it)")
        self.env = QPlainTextEdit()
        self.env.setPlaceholderText("KEY=value, one a line (optional)")
        self.env.setMaximumHeight(70)
        self.url = QLineEdit()
        self.url.setPlaceholderText("https://example.com/mcp")
        self.headers = QPlainTextEdit()
        self.headers.setPlaceholderText("Name: value, one a line (optional)")
        self.headers.setMaximumHeight(70)
        self.problem = _plain("", "addServerProblem")
        form.addRow("Name", self.name)
        form.addRow("Kind", self.kind)
        form.addRow("Command", self.command)
        form.addRow("Environment", self.env)
        form.addRow("URL", self.url)
        form.addRow("Headers", self.headers)
        form.addRow(self.problem)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.kind.currentIndexChanged.connect(self._kind)
        self._kind()

    def _kind(self, *_) -> None:
        program = self.kind.currentIndex() == 0
        for w in (self.command, self.env):
            w.setEnabled(program)
        for w in (self.url, self.headers):
            w.setEnabled(not program)

    def entry(self) -> dict:
        """The server as an mcp.json entry (ValueError for a command line a shell could not split)."""
        def pairs(text: str, sep: str) -> dict:
            out = {}
            for line in filter(None, (x.strip() for x in text.splitlines())):
                key, found, value = line.partition(sep)
                if not found:
                    raise ValueError(f"{show(line, 40)} has no {show(sep)}")
                out[key.strip()] = value.strip() if sep == ":" else value
            return out
        if self.kind.currentIndex() == 1:
            return {"url": self.url.text().strip(), "headers": pairs(self.headers.toPlainText(), ":")}
        words = shlex.split(self.command.text())
        if not words:
            raise ValueError("the command is empty")
        return {"command": words[0], "args": words[1:], "env": pairs(self.env.toPlainText(), "=")}

    def accept(self) -> None:
        try:
            self.server = parse_server(self.name.text().strip(), self.entry())
        except (ConfigError, ValueError) as e:
            self.problem.setText(one_line(e, 300))
            return
        super().accept()


class McpSettingsBox(QWidget):
    def __init__(self, tools, parent=None):
        super().__init__(parent)
        self.tools = tools  # app/tools_controller.py ToolsController
        column = QVBoxLayout(self)
        column.addWidget(_plain("A server starts only after you approve it here, for its exact command line; "
                                "a changed command needs approving again. Every tool call still asks you "
                                "first, unless you allow that tool always below.", "mcpIntro"))
        self.notice = _plain("", "mcpNotice")
        self.asked_to_approve: list[str] = []  # the servers the notice asks to approve (it follows them)
        column.addWidget(self.notice)
        self.empty = _plain("No server yet. Add one (a program or a URL), import another app's mcp.json, or add "
                            "the calculator that comes with Elastic Chat to try tools on the demo.", "mcpEmpty")
        column.addWidget(self.empty)
        self.servers = QListWidget()
        self.servers.setObjectName("mcpServers")
        column.addWidget(self.servers, 1)
        column.addWidget(_plain("Runs exactly:"))
        self.command = QPlainTextEdit()
        self.command.setReadOnly(True)
        self.command.setFont(QFont("monospace"))
        self.command.setMaximumHeight(80)
        self.command.setObjectName("mcpCommand")
        column.addWidget(self.command)
        self.reveal = QCheckBox("Show secret values (tokens, keys)")
        self.reveal.toggled.connect(self._show_selected)
        column.addWidget(self.reveal)
        self.state = _plain("", "mcpState")
        column.addWidget(self.state)
        column.addWidget(_plain("Its tools (checked: runs without asking):"))
        self.tool_list = QListWidget()
        self.tool_list.setObjectName("mcpTools")
        self.tool_list.setMaximumHeight(110)
        self.tool_list.itemChanged.connect(self._tool_changed)
        column.addWidget(self.tool_list)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add…")
        self.import_button = QPushButton("Import a file…")
        self.import_button.setToolTip("Add the servers of another app's mcp.json (Claude Desktop, LM Studio)")
        self.calculator_button = QPushButton("Add the calculator")
        self.calculator_button.setToolTip("The calculator that comes with Elastic Chat (runtime/mcp/calculator.py): "
                                          "sums of whole numbers of any size, to try tools offline on the demo. "
                                          "It starts once you approve it, like any server")
        self.approve_button = QPushButton("Approve and start")
        self.revoke_button = QPushButton("Revoke")
        self.remove_button = QPushButton("Remove")
        for b in (self.add_button, self.import_button, self.calculator_button, self.approve_button,
                  self.revoke_button, self.remove_button):
            b.setAutoDefault(False)
            row.addWidget(b)
        column.addLayout(row)
        self.add_button.clicked.connect(self.add)
        self.import_button.clicked.connect(self.import_file)
        self.calculator_button.clicked.connect(self.add_calculator)
        self.approve_button.clicked.connect(lambda: self._act(self.tools.approve))
        self.revoke_button.clicked.connect(lambda: self._act(self.tools.revoke))
        self.remove_button.clicked.connect(lambda: self._act(self.tools.remove))
        self.servers.currentRowChanged.connect(self._show_selected)
        tools.sig_servers.connect(self.refresh)
        self.refresh()
        if tools.problem:
            self.notice.setText(tools.problem)

    def selected(self):
        item = self.servers.currentItem()
        return self.tools.config.server(item.data(Qt.ItemDataRole.UserRole)) if item else None

    def refresh(self) -> None:
        name = self.selected().name if self.selected() else None
        self.servers.blockSignals(True)
        self.servers.clear()
        for server in self.tools.config.servers:
            approved = self.tools.approvals.is_approved(server)
            status = self.tools.status.get(server.name, "")
            text = f"{for_approval(server.name)} — {'approved' if approved else 'not approved'}" + (
                f" · {one_line(status, 120)}" if status and approved else "")
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, server.name)
            self.servers.addItem(item)
            if server.name == name:
                self.servers.setCurrentItem(item)
        if self.servers.currentRow() < 0 and self.servers.count():
            self.servers.setCurrentRow(0)
        self.servers.blockSignals(False)
        self.empty.setVisible(not self.tools.config.servers)
        self._show_selected()
        self._follow_approvals()

    def _ask_approval(self, names: list[str], more: str = "") -> None:
        """The notice asks to approve `names` (servers just added), and `more` after it."""
        self.asked_to_approve = list(names)
        self.notice.setText((f"Added {', '.join(names)}: approve {'it' if len(names) == 1 else 'each one'} to "
                             "start it." if names else "No new server in that file.") + more)

    def _follow_approvals(self) -> None:
        """The notice asks only about the servers still waiting for approval: once each added one is
        approved (or removed) it goes, and the server's own line says how it runs."""
        waiting = [name for name in self.asked_to_approve if (server := self.tools.config.server(name)) is not None
                   and not self.tools.approvals.is_approved(server)]
        if waiting != self.asked_to_approve:
            self.asked_to_approve = waiting
            self.notice.setText(f"Added {', '.join(waiting)}: approve each one to start it." if waiting else "")

    def _show_selected(self, *_) -> None:
        server = self.selected()
        approved = bool(server) and self.tools.approvals.is_approved(server)
        self.command.setPlainText(for_approval(server.command_line(reveal=self.reveal.isChecked())) if server else "")
        status = self.tools.status.get(server.name, "not started yet").rstrip(".…") if server else ""
        self.state.setText("" if not server else
                           (f"Approved; {status}." if approved else
                            "Not approved: it will not start. Check the command above, then approve it."))
        taken = self.tools.config.server(bundled_calculator().name) is not None  # never over a server of yours
        self.calculator_button.setEnabled(not taken)
        self.approve_button.setEnabled(bool(server) and not approved)
        self.revoke_button.setEnabled(approved)
        self.remove_button.setEnabled(bool(server))
        self.tool_list.blockSignals(True)
        self.tool_list.clear()
        if approved:
            for tool in (t for t in self.tools.known_tools() if t.server == server.name):
                item = QListWidgetItem(for_approval(tool.name))
                item.setToolTip(for_approval(tool.description))
                item.setData(Qt.ItemDataRole.UserRole, tool.name)
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                allowed = self.tools.approvals.is_always_allowed(server, tool)
                item.setCheckState(Qt.CheckState.Checked if allowed else Qt.CheckState.Unchecked)
                self.tool_list.addItem(item)
        self.tool_list.blockSignals(False)

    def _tool_changed(self, item: QListWidgetItem) -> None:
        server = self.selected()
        name = item.data(Qt.ItemDataRole.UserRole)
        tool = next((t for t in self.tools.known_tools() if server and t.server == server.name and t.name == name),
                    None)
        if server is not None and tool is not None and self.tools.approvals.is_approved(server):
            self.tools.approvals.set_always_allowed(server, tool, item.checkState() == Qt.CheckState.Checked)

    def _act(self, action) -> None:
        server = self.selected()
        if server is not None:
            try:
                action(server.name)
            except (OSError, ConfigError) as e:
                self.notice.setText(f"That did not work: {one_line(e, 200)}")

    def add(self) -> None:
        dialog = AddServerDialog(self)
        if dialog.exec() == QDialog.DialogCode.Accepted and dialog.server is not None:
            if self._save(lambda: self.tools.add(dialog.server), ""):
                self._ask_approval([dialog.server.name])

    def add_calculator(self) -> None:
        server = bundled_calculator()
        if self._save(lambda: self.tools.add(server), ""):
            self._ask_approval([server.name])
            self.servers.setCurrentRow(self.tools.config.names.index(server.name))

    def import_file(self, path: str = "") -> None:
        path = path or QFileDialog.getOpenFileName(self, "Import MCP servers", "", "JSON (*.json);;All files (*)")[0]
        if not path:
            return
        result = {}

        def run():
            result["added"], result["skipped"] = self.tools.import_file(path)
        if self._save(run, ""):
            skipped = result["skipped"]
            self._ask_approval(result["added"], f" Already here: {', '.join(skipped)}." if skipped else "")

    def _save(self, change, done: str) -> bool:
        try:
            change()
        except (ConfigError, OSError) as e:
            self.notice.setText(one_line(e, 300))
            return False
        if done:
            self.notice.setText(done)
        return True
