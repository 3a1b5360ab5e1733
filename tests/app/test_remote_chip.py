"""The context meter and an attachment's chip with a model on a server (issue 38): counted by the server's
tokenizer route where it has one (llama.cpp's /apply-template and /tokenize here), or said plainly to be
estimated from the characters where it has none; never a "counting…" that does not end. The servers are
the stand-in of tests/remote_stub.py on 127.0.0.1, which checks what it is asked."""

import json

import pytest
from PySide6.QtWidgets import QLabel

from app.widgets.attachment_row import AttachmentRow, chip_size
from runtime.store.remote_sources import add_source
from tests.app_support import make_window
from tests.remote_stub import RemoteStub, chunk, sse

WAIT_MS = 120000
NOTES = "one two three four five six seven\n"


def use(qtbot, w, source):
    w.models.refresh()
    qtbot.waitUntil(lambda: w.models.row(source.spec) is not None, timeout=WAIT_MS)
    with qtbot.waitSignal(w.controller.sig_model_loaded, timeout=WAIT_MS):
        w.models.use(source.spec)


def llama_cpp(holder):
    """A llama.cpp stand-in: a token is a word; the template wraps the chat's texts in two more."""
    def script(body):
        path = holder[0].posts[-1]
        if path == "/apply-template":
            assert {m["role"] for m in body["messages"]} <= {"system", "user", "assistant"}
            text = " ".join(m["content"] for m in body["messages"])
            return [("status", 200, json.dumps({"prompt": f"<chat> {text} <reply>"}).encode())]
        if path == "/tokenize":
            return [("status", 200, json.dumps({"tokens": body["content"].split()}).encode())]
        return [sse(chunk(content="fine")), sse(chunk(finish="stop")), b"data: [DONE]\n\n"]
    return script


def chip_text(w) -> str:
    labels = [x.text() for x in w.files.items[0].findChildren(QLabel) if x.text()] if w.files.items else []
    return labels[0] if labels else ""


def attach_notes(qtbot, w, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text(NOTES)
    w.controller.composer.attach(str(notes))
    qtbot.waitUntil(lambda: chip_text(w).startswith("notes.txt"), timeout=WAIT_MS)


@pytest.mark.slow
def test_a_server_with_a_tokenizer_route_counts_the_chip_and_the_meter(qtbot, home, tmp_path):
    holder = []
    with RemoteStub([{"id": "star", "owned_by": "llamacpp", "meta": {"n_ctx": 4096}}], llama_cpp(holder)) as stub:
        holder.append(stub)
        w = make_window(qtbot, home)
        use(qtbot, w, add_source(stub.url, "star", None))
        attach_notes(qtbot, w, tmp_path)
        qtbot.waitUntil(lambda: chip_text(w) == "notes.txt · 7 tokens", timeout=WAIT_MS)
        w.input.setPlainText("hello there")
        w.controller.context.count()
        # (the meter may first show the chip's count, before the prompt's count through the template comes)
        qtbot.waitUntil(lambda: "/apply-template" in stub.posts and w.meter.label.text().startswith("Context ")
                        and "/ 4,096 tokens" in w.meter.label.text(), timeout=WAIT_MS)
        assert "estimated" not in w.meter.label.text() and "/tokenize" in stub.posts
        w.close()


@pytest.mark.slow
def test_a_server_without_one_says_the_count_is_estimated_and_from_what(qtbot, home, tmp_path):
    def answers(body):
        return [sse(chunk(content="fine")), sse(chunk(finish="stop")), b"data: [DONE]\n\n"]
    with RemoteStub([{"id": "star", "max_model_len": 4096}], answers) as stub:
        w = make_window(qtbot, home)
        use(qtbot, w, add_source(stub.url, "star", None))
        attach_notes(qtbot, w, tmp_path)
        estimated = f"notes.txt · about {-(-len(NOTES) // 4)} tokens (estimated)"
        qtbot.waitUntil(lambda: chip_text(w) == estimated, timeout=WAIT_MS)
        w.input.setPlainText("hello there")
        w.controller.context.count()
        qtbot.waitUntil(lambda: w.meter.label.text().endswith("tokens (estimated)"), timeout=WAIT_MS)
        assert w.meter.label.text().startswith("Context about ") and "/ 4,096" in w.meter.label.text()
        assert "characters (4 a token)" in w.meter.toolTip() and "no tokenizer route" in w.meter.toolTip()
        assert stub.posts == []  # nothing was asked of a server with no route to ask
        w.close()


def test_a_chip_says_counting_only_while_it_counts(qtbot):
    assert chip_size(-1, "") == "counting…"
    assert chip_size(-1, "no model is loaded") == "not counted"
    assert chip_size(1234, "") == "1,234 tokens"
    assert chip_size(12, "estimated from its characters (4 a token): no route") == "about 12 tokens (estimated)"
    row = AttachmentRow()
    qtbot.addWidget(row)
    row.show_files([("a.txt", 12, "", "estimated from its characters (4 a token): no route")])
    label = next(x for x in row.items[0].findChildren(QLabel) if x.text())
    assert label.text() == "a.txt · about 12 tokens (estimated)" and "4 a token" in label.toolTip()
