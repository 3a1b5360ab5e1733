"""The settings' "Local server" box: serve the loaded model to other programs (OpenAI-compatible).
A dumb view: it shows values and says what the user chose; the window saves them and starts or stops
the server (app/server_control.py). Below the fields: the server's recent requests and a command to
try it (server_requests.py), which the window keeps live while the dialog is open."""

from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QCheckBox, QFormLayout, QGroupBox, QLabel, QLineEdit

from runtime.api import ALLOW_HOSTS, ALLOW_ORIGINS, OptionError

from ..state.settings import SERVER_PORT, server_problem
from .option_box import option_box
from .server_requests import RecentRequestsView


class ServerSettingsBox(QGroupBox):
    def __init__(self, enabled: bool, host: str, port: int, api_key: str, address: str = "", parent=None,
                 web: tuple = ((), ())):
        super().__init__("Local server", parent)
        form = QFormLayout(self)
        self.enabled = QCheckBox("Serve the loaded model to other programs (OpenAI-compatible API)")
        self.enabled.setChecked(enabled)
        self.host = QLineEdit(host)
        self.host.setToolTip("127.0.0.1: only this computer. Any other address needs an API key.")
        self.port = option_box(SERVER_PORT, port)
        self.api_key = QLineEdit(api_key)
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.api_key.setPlaceholderText("optional on 127.0.0.1; clients send it as a Bearer token")
        # The names and web pages it accepts besides its own (runtime/options.py ALLOW_HOSTS, ALLOW_ORIGINS).
        self.allow_hosts, self.allow_origins = (self._list_field(option, values)
                                                for option, values in zip((ALLOW_HOSTS, ALLOW_ORIGINS), web))
        self.note = QLabel()
        self.note.setWordWrap(True)
        form.addRow(self.enabled)
        form.addRow("Address", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", self.api_key)
        form.addRow("Other names", self.allow_hosts)
        form.addRow("Web pages", self.allow_origins)
        form.addRow(self.note)
        self.requests = RecentRequestsView()
        form.addRow(self.requests)
        for w in (self.enabled, self.host, self.api_key, self.allow_hosts, self.allow_origins):
            (w.toggled if w is self.enabled else w.textChanged).connect(self._explain)
        self.port.valueChanged.connect(self._explain)
        self.address = address
        self.model_id = ""  # the id the running server answers to (ServerStatus.model), "" when not known
        self.remote = False  # the server runs while the window chats with a model on another server
        self._explain()

    @Slot(object)
    def show_status(self, status) -> None:
        """The server's state (app/server_control.py ServerStatus): the model id it answers to, and the
        requests view's command to try it."""
        self.model_id = status.model if status.running else ""
        self.remote = status.running and status.remote
        self.requests.show_status(status)
        self._explain()

    def values(self) -> tuple[bool, str, int, str]:
        return self.enabled.isChecked(), self.host.text().strip() or "127.0.0.1", self.port.value(), \
            self.api_key.text().strip()

    def web_values(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The other names and the web pages' origins, as typed (checked by `problem`)."""
        return tuple(ALLOW_HOSTS.split(self.allow_hosts.text())), tuple(ALLOW_ORIGINS.split(self.allow_origins.text()))

    def problem(self) -> str:
        """Why these values cannot be saved, or served when serving is on ("" when they can): the
        settings' check (app/settings.py), which applies the server's own rules."""
        on, host, port, key = self.values()
        for field, option, values in zip(("Other names", "Web pages"), (ALLOW_HOSTS, ALLOW_ORIGINS),
                                         self.web_values()):
            try:
                option.parse(values, field)
            except OptionError as e:
                return f"{e}."
        return server_problem(host, port, key, serving=on)

    @staticmethod
    def _list_field(option, values) -> QLineEdit:
        field = QLineEdit(", ".join(values))
        field.setToolTip(f"Optional: {option.help}. Separate several with commas.")
        field.setPlaceholderText("none" if option is ALLOW_HOSTS else "none: no web page may call the server")
        return field

    def _explain(self, *_) -> None:
        problem = self.problem()
        if problem:
            self.note.setText(problem)
        elif self.enabled.isChecked():
            _, host, port, _ = self.values()
            url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"
            # The id is the checkpoint's folder name, which may differ from the name the app lists ("demo"
            # imported as "demo-2"): say the id itself once the server runs there with a model.
            if url == self.address and self.model_id:
                self.note.setText(f"Serving at {url}: clients use it as base URL and “{self.model_id}” as model id.")
            elif url == self.address and self.remote:
                self.note.setText(f"Serving at {url}, but with no model to serve: the model in use is on another "
                                  "server, and this app serves only a model loaded here. Requests get 503 until "
                                  "you use a local model (Models).")
            else:
                where = (f"Serving at {url}: clients use it as base URL" if url == self.address else
                         f"Clients use base URL {url}")
                self.note.setText(f"{where} and the model id that GET /v1/models lists.")
        else:
            self.note.setText("Editors, agents and scripts that speak OpenAI's API can use the model the app "
                              "has loaded; they take turns with this window.")
