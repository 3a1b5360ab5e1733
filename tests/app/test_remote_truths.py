"""What the window says about a model on a server (issue 38, item 8): the context meter counts against the
server's context (an estimate where the server has no tokenizer route) and never claims no model is
loaded, nothing in the log calls the working entry unusable; a server that stops answering is
"unreachable" in the model manager (with the reason) and ready again once it answers; a drop while
the model thinks is said to cut the thought, not the answer.
The servers are the stand-in of tests/remote_stub.py on 127.0.0.1."""

import logging

import pytest

from app.widgets.model_manager import STATUS
from runtime.store.remote_sources import add_source
from tests.app_support import SUM, ask, make_window
from tests.remote_stub import RemoteStub, chunk, sse

LISTING = [{"id": "star", "max_model_len": 4096}]
DONE = b"data: [DONE]\n\n"


def answers(body):
    return [sse(chunk(content="fine")), sse(chunk(finish="stop")), DONE]


def thinks_then_drops(body):
    return [("length", 100000), sse(chunk(reasoning="first the tens")), ("drop",)]  # the length: a sure drop


def use(qtbot, w, source):
    w.models.refresh()
    qtbot.waitUntil(lambda: w.models.row(source.spec) is not None, timeout=60000)
    with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=60000) as loaded:
        w.models.use(source.spec)
    return loaded.args[0]


def status_shown(w, spec) -> tuple[str, str]:
    """The model manager's Status cell of `spec`'s row: (its text, its tooltip)."""
    table = w.dialogs.manager.table
    row = next(i for i in range(table.rowCount()) if table.item(i, 0).data(256) == spec)  # Qt.UserRole
    return table.item(row, STATUS).text(), table.item(row, STATUS).toolTip()


@pytest.mark.slow
def test_the_meter_on_a_server_model_counts_with_its_context_and_nothing_calls_it_unusable(qtbot, home, caplog):
    caplog.set_level(logging.INFO)
    w = make_window(qtbot, home)
    with RemoteStub(LISTING, answers) as stub:
        use(qtbot, w, add_source(stub.url, "star", None))
        w.input.setPlainText("hello there")  # counted once the typing pauses
        # (the stand-in has no tokenizer route: the count is an estimate, and says so: tests/app/test_remote_chip.py)
        qtbot.waitUntil(lambda: w.meter.label.text().endswith("/ 4,096 tokens (estimated)"), timeout=60000)
        assert w.meter.label.text().startswith("Context about ")
        assert "4,096" in w.meter.toolTip() and w.meter.label.property("over") == ""
        reply = ask(qtbot, w, "hi", "Off")  # the server chats fine meanwhile
        assert reply.content == "fine" and reply.meta["finish_reason"] == "end_of_turn"
        w.input.setPlainText("and again")
        w.controller.context.count()
        assert "no model is loaded" not in w.meter.label.text()
    said = [r.getMessage() for r in caplog.records]
    assert not [line for line in said if "cannot be used for chat" in line or "no token counter" in line], said


@pytest.mark.slow
def test_a_dead_server_is_unreachable_in_the_manager_until_it_answers_and_a_drop_mid_thought_says_so(qtbot, home):
    w = make_window(qtbot, home)
    stub = RemoteStub(LISTING, thinks_then_drops).__enter__()
    port = stub.httpd.server_address[1]
    spec = add_source(stub.url, "star", None).spec
    try:
        use(qtbot, w, add_source(stub.url, "star", None))
        w.dialogs.open_manager()
        with qtbot.waitSignal(w.controller.sig_error, timeout=60000) as error:
            reply = ask(qtbot, w, SUM, "Balanced")
        assert "dropped the connection mid-thought" in error.args[0] and "mid-answer" not in error.args[0]
        assert reply.thinking == "first the tens" and not reply.content
        qtbot.waitUntil(lambda: not w.models.asking, timeout=60000)  # the server was asked again: it answers
        assert w.models.row(spec).status == "active" and status_shown(w, spec)[0] == "active (in use)"
    finally:
        stub.__exit__(None, None, None)  # the server dies

    with qtbot.waitSignal(w.controller.sig_error, timeout=60000) as error:
        ask(qtbot, w, SUM, "Off")
    assert "nothing answers" in error.args[0]
    qtbot.waitUntil(lambda: w.models.row(spec).status == "active, unreachable", timeout=60000)
    text, tip = status_shown(w, spec)
    assert text == "active, unreachable" and "connection refused" in tip and "Refresh" in tip
    assert "unreachable" in w.dialogs.manager.progress_text.text()

    other = add_source(f"http://127.0.0.1:{port}/v1", "other", None).spec  # the same dead server, another model
    w.models.refresh()
    qtbot.waitUntil(lambda: w.models.row(other) is not None, timeout=60000)
    assert w.models.row(other).status == "ready"  # not asked yet
    with qtbot.waitSignal(w.controller.sig_model_failed, timeout=60000):
        w.models.use(other)
    qtbot.waitUntil(lambda: w.models.row(other).status == "unreachable", timeout=60000)  # not "ready", not "active"
    assert status_shown(w, other)[0] == "unreachable"

    with RemoteStub(LISTING, answers, port=port):  # back again
        w.models.refresh()
        qtbot.waitUntil(lambda: w.models.row(other).status == "ready" and w.models.row(spec).status == "ready",
                        timeout=60000)
        assert status_shown(w, other) == ("ready", "ready")
