"""The model manager's "Add server…" dialog: an OpenAI-compatible server as a model source (vLLM,
SGLang, llama.cpp's server, another Elastic Chat). The user enters its address and, if it needs one,
an API key; "List models" probes `/v1/models` in a worker thread; "Add" keeps the chosen model as a
source (the key in the system keyring where there is one: the dialog says where it goes).

A view of `ModelsController` (probe_server, add_server), which does the work and outlives it: a
probe that answers after the dialog closed is dropped.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from runtime.api import counted, one_line


class RemoteSourceDialog(QDialog):
    def __init__(self, parent, models):
        from runtime.api import where_keys_go

        super().__init__(parent)
        self.setWindowTitle("Add an OpenAI-compatible server")
        self.models = models
        self.open_ = True  # False once closed: a late probe answer is dropped
        self.probes = 0  # the answer of the latest probe only
        layout = QVBoxLayout(self)
        intro = QLabel("Chat with a model on another machine: a vLLM, SGLang or llama.cpp server, or another "
                       "Elastic Chat's server. The depth slider runs over the API where the server allows it.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://gpu-box:8000/v1")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("optional")
        self.model = QComboBox()
        self.model.setEnabled(False)
        self.list_button = QPushButton("List models")
        form.addRow("Server address", self.url)
        form.addRow("API key", self.key)
        form.addRow("", self.list_button)
        form.addRow("Model", self.model)
        layout.addLayout(form)
        self.key_note = QLabel(where_keys_go())
        self.key_note.setWordWrap(True)
        self.key_note.setObjectName("depthDetail")
        layout.addWidget(self.key_note)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
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

    def _forget_models(self, *_) -> None:
        """A changed address or key: the listed models may not be that server's."""
        self.model.clear()
        self.model.setEnabled(False)
        self.add_button.setEnabled(False)

    def probe(self) -> None:
        self.probes += 1
        number = self.probes
        self._forget_models()
        self.message.setText("Asking the server for its models…")
        self.list_button.setEnabled(False)
        self.models.probe_server(self.url.text().strip(), self.key.text() or None,
                                 lambda ids: self._listed(number, ids), lambda error: self._failed(number, error))

    def _listed(self, number: int, ids: list) -> None:
        if not self.open_ or number != self.probes:
            return
        self.list_button.setEnabled(True)
        self.model.addItems(ids)
        self.model.setEnabled(True)
        self.add_button.setEnabled(bool(ids))
        self.message.setText(f"The server lists {counted(len(ids), 'model')}. An id:submodel entry pins one "
                             "submodel; the plain id runs the depth slider over its submodels.")

    def _failed(self, number: int, error: str) -> None:
        if not self.open_ or number != self.probes:
            return
        self.list_button.setEnabled(True)
        self.message.setText(one_line(error, 300))

    def add(self) -> None:
        if not self.model.currentText():
            return
        self.models.add_server(self.url.text().strip(), self.model.currentText(), self.key.text() or None)
        self.accept()

    def done(self, result: int) -> None:
        self.open_ = False
        super().done(result)
