"""Attachments: text, code and PDF files as context, their size in tokens shown before sending; pictures
refused with the reason; big or hostile files bounded, each refusal one line naming the file."""

import io

import pytest

from app.state import attachments
from app.state.attachments import AttachmentError, as_context, read_attachment
from app.state.history import History


def make_pdf(text: str) -> bytes:
    """A one-page PDF whose page shows `text` (Helvetica), with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
               b" /Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_text_code_and_pdf_files_become_text(tmp_path):
    (tmp_path / "notes.txt").write_text("café notes\n", encoding="utf-8")
    (tmp_path / "main.py").write_bytes("\ufeffprint('hi')\n".encode("utf-8"))  # a BOM is not text
    (tmp_path / "win.txt").write_bytes("wide text".encode("utf-16"))
    (tmp_path / "paper.pdf").write_bytes(make_pdf("Hello PDF world"))
    assert read_attachment(tmp_path / "notes.txt").text == "café notes\n"
    assert read_attachment(tmp_path / "main.py").text == "print('hi')\n"
    assert read_attachment(tmp_path / "win.txt").text == "wide text"
    pdf = read_attachment(tmp_path / "paper.pdf")
    assert pdf.kind == "pdf" and pdf.text == "Hello PDF world"


def _refused(path, *words):
    with pytest.raises(AttachmentError) as e:
        read_attachment(path)
    assert path.name in str(e.value) and "\n" not in str(e.value), str(e.value)
    for word in words:
        assert word in str(e.value), str(e.value)


def test_pictures_are_refused_with_the_reason(tmp_path):
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"x" * 100)
    (tmp_path / "renamed.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)  # a picture by its bytes
    _refused(tmp_path / "photo.jpg", "picture", "reads text")
    _refused(tmp_path / "renamed.txt", "picture")


def test_hostile_files_are_bounded_and_one_line(tmp_path, monkeypatch):
    (tmp_path / "program.bin").write_bytes(b"\x7fELF\x00\x01" * 100)
    _refused(tmp_path / "program.bin", "not a text file")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    _refused(tmp_path / "latin1.txt", "not a text file")
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 20)
    _refused(tmp_path / "broken.pdf", "could not be read as a PDF")
    (tmp_path / "scan.pdf").write_bytes(make_pdf(""))
    _refused(tmp_path / "scan.pdf", "holds no text")
    monkeypatch.setattr(attachments, "MAX_FILE_BYTES", 1000)
    (tmp_path / "big.log").write_text("x" * 1001)
    _refused(tmp_path / "big.log", "at most")
    _refused(tmp_path, "not a file")
    _refused(tmp_path / "missing.txt", "cannot be attached")
    monkeypatch.setattr(attachments, "MAX_CHARS", 10)
    (tmp_path / "long.txt").write_text("y" * 50)
    cut = read_attachment(tmp_path / "long.txt")
    assert cut.text == "y" * 10 and "first 10 characters" in cut.note


def test_an_encrypted_pdf_says_so(tmp_path):
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf("secret"))))
    writer.encrypt("pw")
    writer.write(tmp_path / "locked.pdf")
    _refused(tmp_path / "locked.pdf", "password-protected")


def test_attachments_travel_in_the_message_and_reach_the_model(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    try:
        cid = h.new_conversation().id
        files = [{"name": "a.txt", "text": "alpha", "kind": "text"}]
        h.add_message(cid, "user", "What is in it?", meta={"attachments": files})
        h.add_message(cid, "user", "bad", meta={"attachments": [{"name": 3}]})  # not a record this app wrote
        first, bad = h.messages(cid)
        assert first.meta["attachments"] == files and "attachments" not in bad.meta
        assert first.as_chat()["content"] == '<file name="a.txt">\nalpha\n</file>\n\nWhat is in it?'
        assert as_context("", files).endswith("</file>")
    finally:
        h.close()


def test_the_window_attaches_counts_and_sends_a_file(qtbot, tmp_path):
    from app.state.settings import Settings
    from tests.app_support import make_window

    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16))
    c = w.controller
    (tmp_path / "notes.md").write_text("The meeting is on Tuesday at 10 in room 4. " * 20)
    qtbot.waitUntil(lambda: w.meter.tokens == 0, timeout=30000)
    with qtbot.waitSignal(c.sig_attachments, timeout=60000, check_params_cb=lambda f: f and f[0][1] > 0) as shown:
        c.composer.attach(str(tmp_path / "notes.md"))
    (name, tokens, _, how), = shown.args[0]
    labels = w.files.items[0].findChildren(type(w.notes.error.label))  # (its icon is a label too)
    assert name == "notes.md" and tokens > 100 and how == "" and w.files.isVisible()
    assert any("tokens" in x.text() for x in labels)
    qtbot.waitUntil(lambda: w.meter.tokens > tokens, timeout=30000)  # the meter counts it before sending
    c.composer.attach(str(tmp_path / "missing.png"))
    qtbot.waitUntil(lambda: w.notes.error.isVisible() and "picture" in w.notes.error.text(), timeout=30000)
    w.input.setPlainText("When is the meeting?")
    with qtbot.waitSignal(c.sig_reply_done, timeout=120000) as done:
        w.send()
    user = c.history.messages(c.chats.current)[0]
    assert user.meta["attachments"][0]["name"] == "notes.md" and not w.files.isVisible()
    assert done.args[1].meta["prompt_tokens"] > tokens and "attached: notes.md" in w.chat.widgets[0].info.text()
    w.close()


def test_a_refused_files_line_goes_when_a_file_is_attached_after_it(qtbot, tmp_path):
    """The red line of a refused file stayed after the next file was attached, as if that one had failed too
    (found in a real-window session). It goes at the next attachment; a line said after it (another error,
    a notice) stays, and a second refusal shows as the first did."""
    from app.state.settings import Settings
    from tests.app_support import make_window

    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=16))
    c, notes = w.controller, w.notes
    for n in range(3):
        (tmp_path / f"notes{n}.md").write_text(f"Meeting {n} is on Tuesday.")

    def attach(path: str, refused: bool) -> None:
        count = len(c.composer.attached.get(c.chats.current, []))
        c.composer.attach(path)
        if refused:
            qtbot.waitUntil(lambda: not notes.error.isHidden() and "picture" in notes.error.text(), timeout=30000)
        else:
            qtbot.waitUntil(lambda: len(c.composer.attached.get(c.chats.current, [])) == count + 1, timeout=30000)

    attach(str(tmp_path / "photo.png"), refused=True)
    attach(str(tmp_path / "notes0.md"), refused=False)
    assert notes.error.isHidden()  # the refusal no longer holds
    attach(str(tmp_path / "photo.png"), refused=True)  # a second refusal shows again
    c.sig_error.emit("The local server is not running: port taken.", "")  # a later line about something else
    attach(str(tmp_path / "notes1.md"), refused=False)
    assert not notes.error.isHidden() and notes.error.text().startswith("The local server")
    attach(str(tmp_path / "notes2.md"), refused=False)  # nothing refused since: nothing withdrawn
    assert notes.error.text().startswith("The local server")
    w.close()
