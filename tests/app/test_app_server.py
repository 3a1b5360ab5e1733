"""The app's local server (pytest-qt, offscreen, the bundled demo engine): the engine the window loaded
answers the official `openai` client, chat and server replies take turns in one line, the Settings
dialog turns the server on, moves it and turns it off, the live strip shows it, bad settings are
refused, and closing the window while a server reply streams ends everything cleanly."""

import contextlib
import json
import logging
import socket
import threading

import openai
import pytest
import requests
from PySide6.QtWidgets import QDialog

from app.state.settings import Settings, server_problem
from app.widgets.settings_dialog import SettingsDialog
from runtime.errors import UsageError
from runtime.server.access_rules import check_listen
from tests.app_support import make_window
from tests.engine_support import held_engine

QUESTION = [{"role": "user", "content": "What is 45 + 23 - 17 + 9?"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def held_port():
    """A port another program listens on, while the block runs."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        yield taken.getsockname()[1]


def client(address: str, timeout: float = 120) -> openai.OpenAI:
    return openai.OpenAI(base_url=address, api_key="unused", max_retries=0, timeout=timeout)


def refused(address: str) -> bool:
    try:
        requests.get(address + "/models", timeout=5)
    except requests.ConnectionError:
        return True
    return False


def answered(url: str, host: str) -> int | None:
    """The status of a GET of `url` addressed to `host`; None while nothing listens there."""
    try:
        return requests.get(url, headers={"Host": host}, timeout=60).status_code
    except requests.ConnectionError:
        return None


def serving(qtbot, data, port: int, **settings):
    """A window whose settings turn the server on at `port`; returns it once the model is loaded and
    the server answers."""
    w = make_window(qtbot, data, Settings(max_new_tokens=40, server_enabled=True, server_port=port, **settings))
    qtbot.waitUntil(lambda: w.controller.server.status().running, timeout=60000)
    return w


@pytest.fixture
def served(qtbot, tmp_path):
    w = serving(qtbot, tmp_path / "data", free_port())
    yield w
    w.close()


def settings_dialog_does(monkeypatch, change):
    """Makes the next Settings dialog apply `change(dialog)`, then press OK (the dialog's own accept)."""
    seen = []

    def exec_(dialog):
        change(dialog)
        dialog.accept()
        seen.append(dialog)
        return dialog.result()

    monkeypatch.setattr(SettingsDialog, "exec", exec_)
    return seen


# ---------------------------------------------------------------------- serving the window's engine


@pytest.mark.slow
def test_the_app_serves_the_engine_it_loaded_and_the_strip_shows_the_address(qtbot, served):
    w, server = served, served.controller.server
    address = server.status().address
    assert address == f"http://127.0.0.1:{w.settings.server_port}/v1"
    qtbot.waitUntil(lambda: w.strip.server.isVisible() and address in w.strip.server.text(), timeout=60000)
    assert w.strip.server.text().startswith("Serving ")
    queue = w.controller.worker.queue
    assert queue.engine is w.controller.worker.engine is not None  # one copy of the weights
    ids = [m.id for m in client(address).models.list().data]
    assert w.loaded.name in ids
    r = client(address).chat.completions.create(model=w.loaded.name, messages=QUESTION, max_tokens=3,
                                                 reasoning_effort="none")
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"
    qtbot.waitUntil(lambda: len(server.server.records) == 1, timeout=60000)  # written just after the reply
    assert server.server.records[0].finish_reason == "length"


@pytest.mark.slow
@pytest.mark.parametrize("first", ["server", "chat"])
def test_a_chat_reply_and_a_server_reply_queued_together_both_complete_in_order(qtbot, served, first):
    w, queue = served, served.controller.worker.queue
    address = w.controller.server.status().address
    blocker = queue.enter("test")  # holds the engine until both replies wait in line
    queue.wait(blocker)
    turns = []
    real_wait = queue.wait

    def wait(ticket):  # records whose turn it is, in the order the line gives turns
        engine = real_wait(ticket)
        turns.append(ticket.who.split()[0])
        return engine

    queue.wait = wait
    answers, errors = [], []

    def ask_server():
        try:
            answers.append(client(address).chat.completions.create(
                model=w.loaded.name, messages=QUESTION, max_tokens=12, reasoning_effort="none"))
        except Exception as e:  # reported by the assertion below, not lost in the thread
            errors.append(e)

    asker = threading.Thread(target=ask_server)
    done = []
    w.controller.sig_reply_done.connect(lambda _cid, message: done.append(message))
    w.controller.set_depth("Off")
    try:
        for who in (first, "chat" if first == "server" else "server"):
            if who == "server":
                asker.start()
            else:
                w.input.setPlainText("What is 2 + 3?")
                w.send()
            qtbot.waitUntil(lambda: any(x.startswith(who) for x in queue.snapshot().waiting), timeout=20000)
        assert [x.split()[0] for x in queue.snapshot().waiting] == [first, "chat" if first == "server" else "server"]
        qtbot.waitUntil(lambda: "2 waiting" in w.strip.server.text(), timeout=60000)
    finally:
        queue.leave(blocker)
    qtbot.waitUntil(lambda: bool(done and (answers or errors)), timeout=180000)
    asker.join(10)
    assert not errors and answers[0].usage.completion_tokens > 0
    assert turns == [first, "chat" if first == "server" else "server"]
    assert done[0].content and done[0].meta["finish_reason"] in ("end_of_turn", "length")


@pytest.mark.slow
def test_the_settings_dialog_moves_the_server_and_turns_it_off(qtbot, served, monkeypatch):
    w, server = served, served.controller.server
    old = server.status().address
    port, notes = free_port(), []

    def move(d):
        notes.append(d.server_box.note.text())
        d.server_box.port.setValue(port)

    seen = settings_dialog_does(monkeypatch, move)
    w.dialogs.open_settings(tab=2)
    assert seen[0].tabs.currentIndex() == 2 and notes[0].startswith(f"Serving at {old}:")
    qtbot.waitUntil(lambda: server.status().address == f"http://127.0.0.1:{port}/v1", timeout=60000)
    assert refused(old) and w.settings.server_port == port
    assert client(server.status().address).models.list().data
    qtbot.waitUntil(lambda: str(port) in w.strip.server.text(), timeout=60000)

    moved = server.status().address
    settings_dialog_does(monkeypatch, lambda d: d.server_box.enabled.setChecked(False))
    w.dialogs.open_settings(tab=2)
    qtbot.waitUntil(lambda: not server.status().running and not w.strip.server.isVisible(), timeout=30000)
    # the listening socket closes in the background stop thread, just after the status says stopped
    qtbot.waitUntil(lambda: refused(moved), timeout=30000)
    assert not w.settings.server_enabled and w.strip.server.text() == ""


@pytest.mark.slow
def test_the_dialog_will_not_open_the_server_to_the_network_without_a_key(qtbot, served, monkeypatch):
    w = served
    before = w.controller.server.status().address

    def open_to_all(d):
        d.server_box.host.setText("0.0.0.0")
        d.server_box.api_key.setText("")

    seen = settings_dialog_does(monkeypatch, open_to_all)
    w.dialogs.open_settings(tab=0)
    dialog = seen[0]
    assert dialog.result() != QDialog.DialogCode.Accepted  # OK did not close it
    assert dialog.tabs.currentIndex() == dialog.server_tab and "API key" in dialog.server_box.note.text()
    assert w.settings.server_host == "127.0.0.1" and w.controller.server.status().address == before


@pytest.mark.slow
def test_a_taken_port_is_reported_in_the_strip_and_the_banner_and_a_free_one_fixes_it(qtbot, tmp_path,
                                                                                      monkeypatch):
    with held_port() as port:
        w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=40, server_enabled=True, server_port=port))
        try:
            server = w.controller.server
            qtbot.waitUntil(lambda: w.strip.server.text().startswith("Server off: "), timeout=60000)
            assert f"port {port} is taken" in w.strip.server.text() and not server.status().running
            assert w.notes.error.isVisible() and "local server is not running" in w.notes.error.text()
            assert "Settings → Server" in w.notes.error.text()
            assert "--port" not in w.notes.error.text()
            assert "used by another program on 127.0.0.1" in w.notes.error.text()
            free = free_port()
            settings_dialog_does(monkeypatch, lambda d: d.server_box.port.setValue(free))
            w.dialogs.open_settings(tab=2)
            qtbot.waitUntil(lambda: server.status().running, timeout=60000)
            assert server.status().address == f"http://127.0.0.1:{free}/v1"
            qtbot.waitUntil(lambda: w.strip.server.text().startswith("Serving "), timeout=60000)
            assert not w.notes.error.isVisible()  # the banner went with the failure
        finally:
            w.close()


def test_a_taken_port_offers_a_free_one_and_one_click_serves_there_and_keeps_it(qtbot, tmp_path):
    with held_port() as port:
        w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=40, server_enabled=True, server_port=port))
        try:
            server = w.controller.server
            qtbot.waitUntil(lambda: w.notes.use_port.isVisible(), timeout=60000)
            offered = w.notes.use_port.property("port")
            assert offered != port and w.notes.use_port.text() == f"Use port {offered}"
            assert f"Use port {offered}, or change" in w.notes.error.text()
            w.notes.use_port.click()
            qtbot.waitUntil(lambda: server.status().running, timeout=60000)
            assert server.status().address == f"http://127.0.0.1:{offered}/v1"
            assert not w.notes.error.isVisible() and not w.notes.use_port.isVisible()
            saved = json.loads((tmp_path / "data" / "settings.json").read_text())
            assert saved["server_port"] == offered  # kept: the next start serves there too
        finally:
            w.close()


def test_the_command_line_keeps_its_own_advice_for_a_taken_port():
    from runtime.server.runner import PortTaken, bind

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(PortTaken) as e:
            bind("127.0.0.1", port)
    assert str(e.value).endswith("; choose another with --port") and e.value.port == port
    assert e.value.free is None or e.value.free > port


@pytest.mark.slow
def test_closing_the_window_while_a_server_reply_streams_ends_everything(qtbot, tmp_path):
    w = serving(qtbot, tmp_path / "data", free_port())
    control, worker = w.controller.server, w.controller.worker
    srv, engine, thread = control.server, worker.engine, w.controller.thread
    chunks, ended = [], []

    def stream():
        try:
            for chunk in client(srv.address).chat.completions.create(
                    model=w.loaded.name, messages=QUESTION, max_tokens=2000, reasoning_effort="none", stream=True):
                chunks.append(chunk)
                valve.allow(1)  # one more token per chunk read: the reply cannot run ahead of the test
            ended.append("finished")
        except Exception as e:  # the server went away mid-stream: a client error, never a hang
            ended.append(type(e).__name__)

    reader = threading.Thread(target=stream)
    with held_engine(engine) as valve:
        valve.allow(4)  # a few tokens ahead of the reader (the server may put several in one chunk)
        reader.start()
        qtbot.waitUntil(lambda: len(chunks) >= 3, timeout=120000)
        assert control.status().in_flight.startswith("server 127.0.0.1:")
        w.close()
    reader.join(30)
    assert not reader.is_alive() and ended
    qtbot.waitUntil(lambda: len(srv.records) == 1, timeout=60000)  # written just after the job let go
    assert not srv.running and not control.status().running
    assert thread.isFinished() and worker.engine is None  # unloaded once the server's reply let go
    state = worker.queue.snapshot()
    assert state.running is None and state.waiting == () and state.state == "empty"
    [record] = srv.records
    assert record.tokens_at_cancel is not None and record.tokens < 2000  # stopped, not run to its end
    assert refused(srv.address)


def test_the_strip_label_elides_and_hides_when_the_server_is_off(qtbot):
    from app.server_control import ServerStatus
    from app.widgets.live_strip import LiveStrip

    strip = LiveStrip()
    qtbot.addWidget(strip)
    strip.set_path("CPU")
    strip.set_memory("RAM 1 MB")
    strip.resize(700, 40)
    strip.show()
    qtbot.waitExposed(strip)
    before = strip.minimumSizeHint().width()
    busy = ServerStatus(True, "http://127.0.0.1:8000/v1", "server 127.0.0.1:51234 · thinking on 1.0M · 120 tokens", 7)
    strip.set_server(busy.summary)
    assert strip.server.isVisible() and strip.server.text() == busy.summary and "7 waiting" in busy.summary
    assert strip.minimumSizeHint().width() <= before + 40  # a character and the gap, whatever the text
    assert strip.server.is_elided() and busy.summary in strip.server.toolTip()
    assert not strip.badge.is_elided() and not strip.ttft.is_elided()  # the live numbers keep their room
    strip.set_server(ServerStatus(False, "", None, 0).summary)
    assert not strip.server.isVisible() and strip.minimumSizeHint().width() == before


# ---------------------------------------------------------------------- the settings' values

GOOD = {"server_enabled": True, "server_host": "192.168.1.20", "server_port": 8123, "server_api_key": "s3cret-key"}
BAD = [
    ("server_enabled", "yes"), ("server_enabled", 1), ("server_enabled", None),
    ("server_host", 5), ("server_host", ""), ("server_host", "my laptop"), ("server_host", "a\nb"),
    ("server_host", "x" * 300), ("server_host", "-bad-.example"), ("server_host", ["127.0.0.1"]),
    ("server_port", 0), ("server_port", 65536), ("server_port", "8000"), ("server_port", 8000.5),
    ("server_port", True), ("server_port", -1),
    ("server_api_key", 12345678), ("server_api_key", "short"), ("server_api_key", "has a space in it"),
    ("server_api_key", "naïve-key-é"),
    ("server_allow_hosts", "box.lan"), ("server_allow_hosts", ["localhost."]), ("server_allow_hosts", [5]),
    ("server_allow_hosts", ["*"]), ("server_allow_hosts", ["x"] * 65), ("server_allow_origins", ["null"]),
    ("server_allow_origins", "*"), ("server_allow_origins", ["http://x.example/page"]),
    ("server_allow_origins", ["x.example"]), ("server_allow_origins", {"http://x.example": 1}),
]


@pytest.mark.parametrize("field,value", BAD, ids=[f"{f}={str(v)[:16]}" for f, v in BAD])
def test_a_bad_server_value_falls_back_alone_with_a_warning(tmp_path, caplog, field, value):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({**GOOD, field: value}))
    with caplog.at_level(logging.WARNING, logger="app.state.settings"):
        s = Settings.load(path)
    assert getattr(s, field) == getattr(Settings(), field)
    for other in set(GOOD) - {field}:
        if not (field == "server_api_key" and other == "server_enabled"):  # see the next test
            assert getattr(s, other) == GOOD[other], other
    assert f"{field} is " in s.problem and "could not be used" in s.problem
    assert any(f"{field} is " in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_an_open_address_without_a_key_keeps_the_server_off(tmp_path, caplog):
    path = tmp_path / "settings.json"
    for data in ({**GOOD, "server_api_key": ""}, {**GOOD, "server_api_key": "short"}):
        path.write_text(json.dumps(data))
        with caplog.at_level(logging.WARNING, logger="app.state.settings"):
            s = Settings.load(path)
        assert not s.server_enabled and s.server_host == "192.168.1.20" and s.server_api_key == ""
        assert "server_enabled is true, but the address 192.168.1.20 lets other computers" in s.problem
        assert "API key" in s.problem and "server stays off" in s.problem and "\n" not in s.problem
        assert "server stays off" in caplog.records[-1].getMessage()
    path.write_text(json.dumps(GOOD))
    s = Settings.load(path)
    assert not s.problem and (s.server_enabled, s.server_host, s.server_port, s.server_api_key) == tuple(GOOD.values())
    path.write_text(json.dumps({**GOOD, "server_enabled": False, "server_api_key": ""}))
    s = Settings.load(path)  # off: an open address may wait for its key
    assert not s.problem and s.server_host == "192.168.1.20"


def test_the_settings_round_trip_the_server_values(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(server_enabled=True, server_host="::1", server_port=9001, server_api_key="")
    assert s.save(path) == ""
    again = Settings.load(path)
    assert not again.problem and (again.server_enabled, again.server_host, again.server_port) == (True, "::1", 9001)


def test_the_settings_round_trip_the_names_and_pages_the_server_allows(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(server_allow_hosts=["Box.LAN", "box.lan", "::1"], server_allow_origins=["HTTP://localhost:3000"])
    assert s.save(path) == ""
    again = Settings.load(path)
    assert not again.problem and again.server_allow_hosts == ["box.lan", "[::1]"]
    assert again.server_allow_origins == ["http://localhost:3000"]


def test_the_settings_box_checks_the_names_and_pages_it_allows(qtbot):
    from app.widgets.server_settings import ServerSettingsBox

    box = ServerSettingsBox(True, "127.0.0.1", 8000, "", web=(["box.lan"], ["http://localhost:3000"]))
    qtbot.addWidget(box)
    assert box.problem() == "" and box.web_values() == (("box.lan",), ("http://localhost:3000",))
    box.allow_origins.setText("http://localhost:3000, null")
    assert "Web pages is 'null'" in box.problem() and "origin" in box.note.text()
    box.allow_origins.setText("*")
    box.allow_hosts.setText("box.lan localhost.")
    assert "Other names is 'localhost.'" in box.problem()
    box.allow_hosts.setText("box.lan, other.lan")
    assert box.problem() == "" and box.web_values() == (("box.lan", "other.lan"), ("*",))


@pytest.mark.slow
def test_the_apps_server_refuses_other_names_and_pages_as_serve_does(qtbot, tmp_path, monkeypatch):
    w = serving(qtbot, tmp_path / "data", free_port(), server_allow_origins=["http://localhost:3000"])
    try:
        address = w.controller.server.status().address
        body = {"model": w.loaded.name, "messages": QUESTION, "max_tokens": 2, "reasoning_effort": "none"}
        chat = address + "/chat/completions"
        r = requests.post(chat, json=body, headers={"Host": "evil.example"}, timeout=60)
        assert r.status_code == 421 and r.json()["error"]["code"] == "host_not_allowed"
        r = requests.post(chat, json=body, headers={"Origin": "http://evil.example"}, timeout=60)
        assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
        r = requests.post(chat, data=json.dumps(body), headers={"Content-Type": "text/plain"}, timeout=60)
        assert r.status_code == 415
        r = requests.post(chat, json=body, headers={"Origin": "http://localhost:3000"}, timeout=60)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert requests.get(address + "/models", headers={"Host": "box.lan"}, timeout=60).status_code == 421

        settings_dialog_does(monkeypatch, lambda d: d.server_box.allow_hosts.setText("box.lan"))
        w.dialogs.open_settings(tab=2)  # a new name restarts the server with it
        assert w.settings.server_allow_hosts == ["box.lan"]
        qtbot.waitUntil(lambda: answered(address + "/models", "box.lan") == 200, timeout=60000)
        assert requests.get(address + "/models", headers={"Host": "evil.example"}, timeout=60).status_code == 421
    finally:
        w.close()


@pytest.mark.parametrize("host,key", [("127.0.0.1", ""), ("localhost", ""), ("::1", ""), ("127.0.0.2", ""),
                                      ("0.0.0.0", ""), ("192.168.1.20", ""), ("::", ""), ("example.com", ""),
                                      ("0.0.0.0", "s3cret-key"), ("0.0.0.0", "short"), ("127.0.0.1", "short"),
                                      ("127.0.0.1", "with space"), ("127.1", "s3cret-key"), ("my_host", ""),
                                      ("Box.LAN", "s3cret-key"), ("localhost.", ""), ("[::1]", "")])
def test_the_app_accepts_exactly_the_addresses_serve_accepts(host, key):
    try:
        check_listen(host, 8000, key or None)
        serve_accepts = True
    except UsageError:
        serve_accepts = False
    assert (server_problem(host, 8000, key) == "") == serve_accepts
