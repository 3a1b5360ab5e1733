"""The model manager's "Add server…" dialog: an OpenAI-compatible server as a model source (vLLM,
SGLang, llama.cpp's server, another Elastic Chat). The user enters its address and, if it needs one,
an API key; "List models" probes `/v1/models` in a worker thread; "Add" keeps the chosen model as a
source (the key in the system keyring where there is one: the dialog says where it goes).

The texts and fields keep their height whatever the list holds: the models listed go into a list of
their own that takes the dialog's spare room and scrolls, and the dialog never gets shorter than its
wrapped texts need at its width (a combo box and a fixed-height dialog squeezed the intro to a
sliver once "List models" answered).

A view of `ModelsController` (probe_server, add_server), which does the work and outlives it: a
probe that answers after the dialog closed is dropped.
"""

from __future__ import annotations

import re

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
)

from runtime.api import counted, one_line

SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)
HTTP_MISSPELT = re.compile(r"^(https?):/*(.*)$", re.IGNORECASE | re.DOTALL)  # "http:host", "http:/host"


def read_address(text: str) -> tuple[str, str]:
    """(the server address `text` is read as, "") or ("", a line saying what to write instead). An address
    without a scheme is read as http:// ("localhost:8000" is http://localhost:8000/v1: a server on a LAN or
    this PC rarely has TLS, and https:// is typed when it does); another scheme is refused with the http://
    form to write. The rest (the port, the path) is runtime/remote's to check."""
    text = text.strip()
    if not text:
        return "", ""  # (the runtime's line asks for an address)
    scheme = SCHEME.match(text)
    if scheme and scheme.group(1).lower() in ("http", "https"):
        return scheme.group(1).lower() + "://" + scheme.group(2), ""
    if scheme:
        return "", (f"{scheme.group(1)}:// is not a server's address: write it as "
                    f"{_written('http', scheme.group(2))} (or https://…).")
    misspelt = HTTP_MISSPELT.match(text)
    if misspelt:
        return "", f"Write it as {_written(misspelt.group(1).lower(), misspelt.group(2))}, with two slashes."
    return "http://" + text.lstrip("/"), ""


def _written(scheme: str, rest: str) -> str:
    """The address to write for `rest` (host, port, path) over `scheme`, with /v1; an example without a host."""
    if not rest or rest.startswith("/"):
        return f"{scheme}://gpu-box:8000/v1, with the server's name and port"
    url = f"{scheme}://{rest.rstrip('/')}"
    return url if url.endswith("/v1") else url + "/v1"


class RemoteSourceDialog(QDialog):
    def __init__(self, parent, models):
        from runtime.api import where_keys_go

        super().__init__(parent)
        self.setWindowTitle("Add an OpenAI-compatible server")
        self.models = models
        self.open_ = True  # False once closed: a late probe answer is dropped
        self.probes = 0  # the answer of the latest probe only
        layout = QVBoxLayout(self)
        self.intro = intro = QLabel("Chat with a model on another machine: a vLLM, SGLang or llama.cpp server, or "
                                    "another Elastic Chat's server. The depth slider runs over the API where the "
                                    "server allows it.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://gpu-box:8000/v1")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("optional")
        self.list_button = QPushButton("List models")
        form.addRow("Server address", self.url)
        form.addRow("API key", self.key)
        form.addRow("", self.list_button)
        layout.addLayout(form)
        self.key_note = QLabel(where_keys_go())
        self.key_note.setWordWrap(True)
        self.key_note.setObjectName("depthDetail")
        layout.addWidget(self.key_note)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        self.model = QListWidget()  # the models listed: the one stretchy part, it scrolls
        self.model.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # ids of one family differ at the end
        self.model.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.model.setMinimumHeight(4 * self.model.fontMetrics().lineSpacing() + 8)
        self.model.setEnabled(False)
        self.model.itemDoubleClicked.connect(self.add)
        layout.addWidget(QLabel("Model"))
        layout.addWidget(self.model, 1)
        for label in (intro, self.key_note, self.message):
            label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.add_button = self.buttons.addButton("Add", QDialogButtonBox.ButtonRole.AcceptRole)
        self.add_button.setEnabled(False)
        layout.addWidget(self.buttons)
        self.list_button.clicked.connect(self.probe)
        self.url.returnPressed.connect(self.probe)
        self.url.textEdited.connect(self._forget_models)
        self.key.textEdited.connect(self._forget_models)
        self.buttons.accepted.connect(self.add)
        self.buttons.rejected.connect(self.reject)
        self.resize(max(520, self.sizeHint().width()), self.sizeHint().height())

    def resizeEvent(self, event) -> None:
        """No shorter than the wrapped texts need at this width: the list gives up its room first."""
        super().resizeEvent(event)
        self._keep_texts_whole()

    def _keep_texts_whole(self) -> None:
        least = self.layout().totalMinimumHeightForWidth(self.width())
        if least > 0 and least != self.minimumHeight():
            self.setMinimumHeight(least)

    def _forget_models(self, *_) -> None:
        """A changed address or key: the listed models may not be that server's."""
        self.model.clear()
        self.model.setEnabled(False)
        self.add_button.setEnabled(False)

    def address(self) -> str | None:
        """The address typed, as it is read (shown in the field); None when it cannot be, the line says why."""
        url, problem = read_address(self.url.text())
        if problem:
            self.message.setText(problem)
            self._keep_texts_whole()
            return None
        if url and url != self.url.text():
            self.url.setText(url)  # what is asked is what the field shows (not an edit: the list stays)
        return url

    def probe(self) -> None:
        self.probes += 1
        number = self.probes
        self._forget_models()
        url = self.address()
        if url is None:
            return
        self.message.setText("Asking the server for its models…")
        self.list_button.setEnabled(False)
        self.models.probe_server(url, self.key.text() or None,
                                 lambda ids: self._listed(number, ids), lambda error: self._failed(number, error))

    def _listed(self, number: int, ids: list) -> None:
        if not self.open_ or number != self.probes:
            return
        self.list_button.setEnabled(True)
        for model_id in ids:
            item = QListWidgetItem(model_id)
            item.setToolTip(model_id)
            self.model.addItem(item)
        self.model.setEnabled(True)
        if ids:
            self.model.setCurrentRow(0)
        self.add_button.setEnabled(bool(ids))
        self.message.setText(f"The server lists {counted(len(ids), 'model')}. An id:submodel entry pins one "
                             "submodel; the plain id runs the depth slider over its submodels.")
        self._keep_texts_whole()

    def _failed(self, number: int, error: str) -> None:
        if not self.open_ or number != self.probes:
            return
        self.list_button.setEnabled(True)
        self.message.setText(one_line(error, 300))
        self._keep_texts_whole()

    def chosen(self) -> str:
        """The model id chosen in the list ("" : none)."""
        item = self.model.currentItem()
        return item.text() if item is not None and self.model.isEnabled() else ""

    def add(self, *_) -> None:
        url = self.address()
        if not self.chosen() or url is None:
            return
        self.models.add_server(url, self.chosen(), self.key.text() or None)
        self.accept()

    def done(self, result: int) -> None:
        self.open_ = False
        super().done(result)
