"""A native library's failure never takes the app down (issue 24): a Rust panic (a BaseException) is
reported by the worker that met it, the crash dialog opens only on the GUI thread, and a model that
failed to load, or was loading when the process died, is not loaded again at the next start unasked."""

import json
import shutil
import sys
import threading

import pytest
from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QMessageBox

from app import crash
from app.crash import LoadRecord
from app.state.settings import Settings
from app.workers import EngineWorker, start_in_thread, stop_thread
from tests.app_support import make_window, warmed_up
from tests.paths import DEMO


class PanicLike(BaseException):
    """What pyo3 raises for a Rust panic: a BaseException that is not an Exception."""


@pytest.fixture
def dialogs(qapp, monkeypatch, tmp_path):
    """The crash hook installed, with the dialog replaced by a record of the thread it opened on."""
    shown = []
    monkeypatch.setattr(QMessageBox, "critical", lambda *a: shown.append((threading.current_thread(), a[2])))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(crash, "_relay", None)
    crash.install(tmp_path / "crash.log")
    crash.install_relay()
    return shown


class Raiser(QObject):
    sig_go = Signal()

    @Slot()
    def go(self):
        raise PanicLike("Onig: retry-limit-in-match over")


def in_python_thread(fn):
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def raise_and_hook():
    try:
        raise PanicLike("boom")
    except PanicLike:
        sys.excepthook(*sys.exc_info())


@pytest.mark.parametrize("where", ["qthread slot", "python thread", "excepthook off the gui thread", "gui thread"])
def test_the_crash_dialog_opens_on_the_gui_thread_whichever_thread_crashed(qtbot, dialogs, where):
    if where == "qthread slot":  # PySide hands a slot's exception to sys.excepthook in the worker's thread
        raiser = Raiser()
        thread = start_in_thread(raiser, "crashing")
        raiser.sig_go.connect(raiser.go)
        raiser.sig_go.emit()
    elif where == "python thread":  # threading.excepthook
        in_python_thread(lambda: (_ for _ in ()).throw(PanicLike("boom")))
    elif where == "excepthook off the gui thread":
        in_python_thread(raise_and_hook)
    else:
        raise_and_hook()
    qtbot.waitUntil(lambda: len(dialogs) == 1, timeout=10000)
    assert dialogs[0][0] is threading.main_thread() and "PanicLike" in dialogs[0][1]
    if where == "qthread slot":
        stop_thread(thread)


# ----------------------------------------------------------------------------- the engine worker


@pytest.fixture
def worker(qtbot, tmp_path):
    w = EngineWorker(512, load_record=LoadRecord(tmp_path))
    thread = start_in_thread(w, "engine")
    yield w
    stop_thread(thread)


def panics(*_a, **_k):
    raise PanicLike("Onig: retry-limit-in-match over")


def test_a_panic_in_a_reply_fails_that_reply_and_the_worker_lives(qtbot, worker, monkeypatch):
    import app.workers
    from runtime.generate import ChatRequest

    monkeypatch.setattr(app.workers, "stream_in_turn", panics)
    with qtbot.waitSignal(worker.sig_reply_failed, timeout=10000) as failed:
        worker.generate(7, app.workers.PlainReply(ChatRequest(({"role": "user", "content": "hi"},), None, "1.5M")),
                        None)
    assert failed.args == [7, "Rust panic: Onig: retry-limit-in-match over"]


@pytest.mark.parametrize("where", ["Engine.load", "ChatFormat"])
def test_a_panic_while_loading_is_a_failed_load_and_is_recorded(qtbot, worker, tmp_path, monkeypatch, where):
    import runtime.chat_format
    import runtime.engine

    target = runtime.engine.Engine if where == "Engine.load" else runtime.chat_format.ChatFormat
    monkeypatch.setattr(target, "load" if where == "Engine.load" else "__init__", panics)
    with qtbot.waitSignal(worker.sig_load_failed, timeout=60000) as failed:
        worker.load(str(DEMO), "", False)  # called here, so it has returned (and written the record) by now
    assert "Rust panic" in failed.args[0]
    assert worker.load_record.blocked(str(DEMO)).startswith("it failed to load last time: Rust panic")


def backtracking_checkpoint(tmp_path):
    """The demo with a tokenizer.json whose Split regex backtracks (Oniguruma panics past its retry limit)."""
    folder = shutil.copytree(DEMO, tmp_path / "backtracks")
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    return folder


def test_a_tokenizer_that_panics_is_a_failed_load_not_a_dead_worker(qtbot, worker, tmp_path):
    folder = backtracking_checkpoint(tmp_path)
    with qtbot.waitSignal(worker.sig_load_failed, timeout=120000) as failed:
        worker.load(str(folder), "", False)
    assert "the tokenizer fails on ordinary short texts" in failed.args[0] and "Rust panic" in failed.args[0]
    with qtbot.waitSignal(worker.sig_loaded, timeout=120000):  # the same worker loads the next model
        worker.load(str(DEMO), "", True)


# ----------------------------------------------------------------------------- the next start


def test_the_load_record_says_why_a_model_is_held(tmp_path):
    record = LoadRecord(tmp_path)
    assert record.blocked("/m") == ""
    record.begin("/m")  # and then the process died
    assert record.blocked("/m") == "the last session ended while it was loading" and record.blocked("/other") == ""
    record.end("/m", "the tokenizer fails")
    assert record.blocked("/m") == "it failed to load last time: the tokenizer fails"
    record.begin("/m")
    record.end("/m")
    assert record.blocked("/m") == ""
    for junk in (b"\xff\xfe", b"[1, 2]", b'{"model": ["/m"]}', b"{" * 100000):
        (tmp_path / "model.loading").write_bytes(junk)
        assert record.blocked("/m") == ""  # a damaged record holds nothing back


@pytest.mark.parametrize("how", ["crashed while loading", "failed to load"])
def test_a_remembered_model_that_failed_opens_the_demo_with_a_banner_and_try_again(qtbot, tmp_path, how):
    data = tmp_path / "data"
    data.mkdir()
    folder = backtracking_checkpoint(tmp_path)
    record = LoadRecord(data)
    record.begin(str(folder))
    if how == "failed to load":
        record.end(str(folder), "the tokenizer fails on ordinary short texts")
    w = make_window(qtbot, data, Settings(active_model=str(folder)))
    assert w.loaded.is_demo and w.notes.retry_load.isVisible()
    banner = w.notes.error.text()
    assert "backtracks was not loaded" in banner and ("while it was loading" in banner or "tokenizer fails" in banner)
    with qtbot.waitSignal(w.controller.sig_model_failed, timeout=120000):
        w.notes.retry_load.click()  # asked for: it loads (and fails again, saying why)
    assert not w.notes.retry_load.isVisible() and "the tokenizer fails on ordinary short texts" in w.notes.error.text()
    # the worker writes the record just after it reports the failure
    qtbot.waitUntil(lambda: record.blocked(str(folder)).startswith("it failed to load last time"), timeout=10000)


def test_a_model_asked_for_on_the_command_line_loads_even_if_it_failed_before(qtbot, tmp_path):
    from app.main_window import MainWindow

    data = tmp_path / "data"
    data.mkdir()
    record = LoadRecord(data)
    record.begin(str(DEMO))
    record.end(str(DEMO), "an old failure")
    w = MainWindow(data, Settings(), data / "settings.json", checkpoint=str(DEMO))
    qtbot.addWidget(w)
    qtbot.waitUntil(lambda: w.loaded is not None, timeout=180000)
    warmed_up(qtbot, w)
    assert w.notes.retry_load.isHidden() and not w.loaded.is_demo
    # the worker clears the record just after the load's exclusive hold ends (workers.py's finally), so
    # a moment after the queue is free: wait for it rather than race it
    qtbot.waitUntil(lambda: record.blocked(str(DEMO)) == "", timeout=10000)


def test_choosing_another_model_withdraws_the_offer_to_try_again(qtbot, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    folder = backtracking_checkpoint(tmp_path)
    LoadRecord(data).begin(str(folder))
    w = make_window(qtbot, data, Settings(active_model=str(folder)))
    assert w.notes.retry_load.isVisible()
    with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=120000):
        w.models.sig_use.emit(str(DEMO), "")  # the model manager's Use
    assert not w.notes.retry_load.isVisible() and w.settings.active_model == str(DEMO)
