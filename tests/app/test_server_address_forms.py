"""Add server…'s address as people type it: without a scheme ("localhost:8000") it is read as http://
(the field then shows what is asked); another scheme or a misspelt http: is refused with the address to
write instead; nothing is asked of a server then. Before, "localhost:8000" was refused as "not an http://
or https:// address" without saying what to type (a real-window session)."""

import pytest

from app.widgets.remote_source import RemoteSourceDialog, read_address
from runtime.api import RemoteServer


class RecordingModels:
    """The model manager's controller as the dialog sees it: the addresses asked and added."""

    def __init__(self):
        self.asked, self.added, self.answer = [], [], None

    def probe_server(self, url, key, listed, failed) -> None:
        self.asked.append(url)
        self.answer = listed

    def add_server(self, url, model, key) -> None:
        self.added.append((url, model))


@pytest.mark.parametrize("typed, read, host, port", [
    ("localhost:8000", "http://localhost:8000", "localhost", 8000),
    ("  gpu-box:8000/v1 ", "http://gpu-box:8000/v1", "gpu-box", 8000),
    ("192.168.1.5:8080", "http://192.168.1.5:8080", "192.168.1.5", 8080),
    ("gpu-box", "http://gpu-box", "gpu-box", 80),
    ("//gpu-box:9000", "http://gpu-box:9000", "gpu-box", 9000),
    ("[::1]:8000", "http://[::1]:8000", "::1", 8000),
    ("HTTPS://llm.example.com/v1", "https://llm.example.com/v1", "llm.example.com", 443),
    ("http://gpu-box:8000/v1", "http://gpu-box:8000/v1", "gpu-box", 8000),
])
def test_an_address_without_a_scheme_is_read_as_http(typed, read, host, port):
    assert read_address(typed) == (read, "")
    server = RemoteServer(read)
    assert (server.host, server.port, server.prefix) == (host, port, "/v1")


@pytest.mark.parametrize("typed, write", [
    ("ftp://gpu-box:8000", "http://gpu-box:8000/v1"),
    ("ws://localhost:8000/v1", "http://localhost:8000/v1"),
    ("file:///tmp/x", "http://gpu-box:8000/v1, with the server's name"),
    ("http:/localhost:8000", "http://localhost:8000/v1"),
    ("http:localhost:8000", "http://localhost:8000/v1"),
    ("https:/llm.example.com/v1", "https://llm.example.com/v1"),
])
def test_another_scheme_says_what_to_write(typed, write):
    url, line = read_address(typed)
    assert url == "" and f"write it as {write}" in line.lower()
    assert "\n" not in line


@pytest.mark.parametrize("typed, shown", [("localhost:8000", "http://localhost:8000"),
                                          ("gpu-box:8000/v1", "http://gpu-box:8000/v1")])
def test_the_dialog_asks_and_adds_what_the_field_shows(qtbot, typed, shown):
    models = RecordingModels()
    dialog = RemoteSourceDialog(None, models)
    qtbot.addWidget(dialog)
    dialog.url.setText(typed)
    dialog.list_button.click()
    assert models.asked == [shown] and dialog.url.text() == shown
    models.answer(["m"])
    assert dialog.add_button.isEnabled()  # rewriting the field did not forget the models listed
    dialog.add()
    assert models.added == [(shown, "m")]


@pytest.mark.parametrize("typed", ["ftp://gpu-box:8000", "http:/localhost:8000"])
def test_the_dialog_asks_nothing_of_an_address_it_cannot_read(qtbot, typed):
    models = RecordingModels()
    dialog = RemoteSourceDialog(None, models)
    qtbot.addWidget(dialog)
    dialog.url.setText(typed)
    dialog.list_button.click()
    assert models.asked == [] and "http://" in dialog.message.text() and dialog.list_button.isEnabled()
