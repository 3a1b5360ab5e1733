"""The window on a remote engine: a server added as a model source (here `runtime serve` on the demo,
on 127.0.0.1) is used like a local model: it chats with the depth slider doing what it says, the
live strip names the machine that answered, and a server that dies mid-reply is one line in the
chat with the partial reply kept, the window still working."""

import pytest

from runtime.engine import Engine
from runtime.engine_queue import EngineQueue
from runtime.server.runner import ServerThread
from runtime.store.remote_sources import add_source
from tests.app_support import SUM, ask, make_window
from tests.paths import DEMO
from tests.remote_stub import RemoteStub, chunk, sse


def use(qtbot, w, source):
    w.models.refresh()
    qtbot.waitUntil(lambda: w.models.row(source.spec) is not None, timeout=60000)
    with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=60000) as loaded:
        w.models.use(source.spec)
    return loaded.args[0]


@pytest.mark.slow
def test_the_window_chats_on_a_remote_server_and_survives_one_that_dies(qtbot, home):
    queue = EngineQueue()
    queue.set_engine(Engine.load(DEMO, device="cpu", max_context=2048))
    srv = ServerThread(queue, "127.0.0.1", 0).start()
    try:
        w = make_window(qtbot, home)
        address = srv.address.split("/")[2]
        loaded = use(qtbot, w, add_source(srv.address, DEMO.name, None))
        assert loaded.name == f"{DEMO.name} on {address}" and loaded.submodels == ("0.5M", "1.0M", "1.5M")
        assert f"remote: {address}" in w.strip.path.text()
        assert w.picker.resident.text() == "served: 0.5M, 1.0M, 1.5M"  # not "in memory": nothing of it is on this PC
        assert "in memory" not in w.model_line.text() and "served" in w.model_line.text()
        assert w.settings.active_model.startswith("remote+http://127.0.0.1")  # the next start reconnects
        with qtbot.waitSignal(w.controller.sig_switch, timeout=300000) as switch:
            reply = ask(qtbot, w, SUM, "Balanced")
        assert switch.args[:2] == ["1.0M", "1.5M"] and reply.content and reply.thinking
        assert (reply.meta["think_submodel"], reply.meta["answer_submodel"]) == ("1.0M", "1.5M")
        assert reply.meta["finish_reason"] == "end_of_turn" and reply.meta["ttft_ms"] > 0
    finally:
        srv.stop()

    def dies(body):  # two words of an answer, then the connection drops
        return [sse(chunk(content="partial ")), sse(chunk(content="reply")), ("drop",)]
    with RemoteStub([{"id": "star", "max_model_len": 4096}], dies) as stub:
        use(qtbot, w, add_source(stub.url, "star", None))
        with qtbot.waitSignal(w.controller.sig_error, timeout=60000) as error:
            reply = ask(qtbot, w, SUM, "Off")
    assert reply.content == "partial reply" and reply.meta["finish_reason"] == "error"
    assert "dropped the connection" in error.args[0] and "\n" not in error.args[0]
    assert w.notes.error.isVisible() and w.send_button.isEnabled()


def test_the_add_server_dialog_probes_says_where_the_key_goes_and_adds_a_usable_row(qtbot, home, monkeypatch):
    import keyring
    from keyring.backends import fail

    from app.models_controller import ModelsController
    from app.widgets.model_manager import ModelManager
    from tests.paths import PROBES

    monkeypatch.setattr(keyring, "get_keyring", lambda: fail.Keyring())  # no OS keyring: the file keeps it
    models = ModelsController(probe_file=str(PROBES / "rtx5090.json"))
    try:
        manager = ModelManager(models=models)
        qtbot.addWidget(manager)
        with RemoteStub([{"id": "star", "max_model_len": 4096}, {"id": "star:12B"}]) as stub:
            dialog = manager.add_server()
            assert "No system keyring" in dialog.key_note.text() and not dialog.add_button.isEnabled()
            dialog.url.setText("http://127.0.0.1:1")  # nothing listens on port 1
            dialog.probe()
            qtbot.waitUntil(lambda: "nothing answers" in dialog.message.text(), timeout=30000)
            assert not dialog.add_button.isEnabled()
            dialog.url.setText(stub.url)
            dialog.key.setText("sk-team")
            dialog.probe()
            qtbot.waitUntil(dialog.add_button.isEnabled, timeout=30000)
            assert [dialog.model.item(i).text() for i in range(dialog.model.count())] == ["star", "star:12B"]
            assert dialog.message.text().startswith("The server lists 2 models.")
            with qtbot.waitSignal(models.sig_changed, timeout=30000):
                dialog.add_button.click()
        spec = f"remote+{stub.url}#star"
        qtbot.waitUntil(lambda: models.row(spec) is not None, timeout=60000)
        row = models.row(spec)
        assert row.title.startswith("star on 127.0.0.1:") and "key in remote_servers.json" in row.path_text
        assert models.actions(spec)["Use"] and models.actions(spec)["Delete"] and not models.actions(spec)["Verify"]
        with qtbot.waitSignal(models.sig_use, timeout=5000) as used:
            models.use(spec)
        assert used.args == [spec, ""] and models.row(spec).status == "active"
    finally:
        models.shutdown()
