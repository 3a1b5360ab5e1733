"""Files attached to a message as context (no Qt): text, code and PDF files become text the model reads.

A file is input from outside, so it is read bounded and every refusal is one line naming the file:
pictures are refused with the reason (the model reads text), a file over `MAX_FILE_BYTES` (text) or
`MAX_PDF_BYTES` is refused before it is read, bytes that are not text (a NUL, not UTF-8 or UTF-16) are
refused, a PDF that fails to parse, is encrypted or holds no text is one line, and the text taken from
any file stops at `MAX_CHARS` (the context meter then shows what it costs). Reading a PDF can take a
while: the window runs `read_attachment` in a worker thread.

An attachment travels in its message's details (`meta["attachments"]`: name and text), so the chat,
its versions, the history and an exported file keep it; `as_context` is what the model is sent.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 4 * 2**20  # a text or code file
MAX_PDF_BYTES = 64 * 2**20
MAX_PDF_PAGES = 2000
MAX_CHARS = 2_000_000  # of text from one file: far beyond any context; the meter shows the cost
MAX_NAME = 200
PICTURES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".heic", ".heif", ".ico", ".svg",
            ".avif"}
PICTURE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM", b"II*\x00", b"MM\x00*")


class AttachmentError(ValueError):
    """A file that cannot be attached; str(e) is one line for the window."""


@dataclass(frozen=True)
class Attachment:
    name: str  # the file's name (not its folder: the chat may travel)
    text: str
    kind: str  # "text" or "pdf"
    note: str = ""  # what was left out ("only the first 2,000,000 characters")

    def to_dict(self) -> dict:
        return {"name": self.name, "text": self.text, "kind": self.kind}


def read_attachment(path: Path | str) -> Attachment:
    path = Path(path)
    name = path.name[:MAX_NAME]
    if path.suffix.lower() in PICTURES:
        raise AttachmentError(f"{name} is a picture: the model reads text only, so pictures cannot be attached.")
    try:
        info = os.stat(path)
    except OSError as e:
        raise AttachmentError(f"{name} cannot be attached: {(e.strerror or str(e)).lower()}.") from None
    if not stat.S_ISREG(info.st_mode):
        raise AttachmentError(f"{name} cannot be attached: it is not a file.")
    pdf = path.suffix.lower() == ".pdf"
    limit = MAX_PDF_BYTES if pdf else MAX_FILE_BYTES
    if info.st_size > limit:
        raise AttachmentError(f"{name} is {info.st_size / 2**20:.1f} MiB; files of at most {limit // 2**20} MiB "
                              "can be attached (attach a part of it).")
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as e:
        raise AttachmentError(f"{name} cannot be read: {(e.strerror or str(e)).lower()}.") from None
    if pdf or raw.startswith(b"%PDF-"):
        return _pdf(name, raw)
    if raw.startswith(PICTURE_MAGIC) or raw[8:12] == b"WEBP":
        raise AttachmentError(f"{name} is a picture: the model reads text only, so pictures cannot be attached.")
    return _bounded(name, _decode(name, raw), "text")


def _decode(name: str, raw: bytes) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError:
            pass
    elif b"\x00" not in raw[:8192]:
        try:
            return raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            pass
    raise AttachmentError(f"{name} is not a text file (its bytes are not UTF-8 or UTF-16 text); attach text, "
                          "code or PDF files.")


def _pdf(name: str, raw: bytes) -> Attachment:
    import io
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # a damaged PDF's warnings are ours to say, once
    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted:
            raise AttachmentError(f"{name} is password-protected; save an unprotected copy to attach it.")
        pages, texts, total = reader.pages, [], 0
        for page in list(pages)[:MAX_PDF_PAGES]:
            text = page.extract_text() or ""
            texts.append(text)
            total += len(text)
            if total > MAX_CHARS:
                break
    except AttachmentError:
        raise
    except Exception as e:  # pypdf raises many kinds for a damaged file; all mean the same to the user
        raise AttachmentError(f"{name} could not be read as a PDF ({type(e).__name__}); attach another copy, "
                              "or its text.") from None
    text = "\n\n".join(t.strip() for t in texts if t.strip())
    if not text:
        raise AttachmentError(f"{name} holds no text (a scanned PDF is pictures of pages); the model reads text "
                              "only.")
    attachment = _bounded(name, text, "pdf")
    if len(pages) > MAX_PDF_PAGES:
        return Attachment(name, attachment.text, "pdf", f"only its first {MAX_PDF_PAGES:,} pages")
    return attachment


def _bounded(name: str, text: str, kind: str) -> Attachment:
    if len(text) > MAX_CHARS:
        return Attachment(name, text[:MAX_CHARS], kind, f"only its first {MAX_CHARS:,} characters")
    return Attachment(name, text, kind)


def as_context(content: str, attachments) -> str:
    """A user message with its attachments, as the model reads it: each file's text, named, after it."""
    files = [a for a in attachments or () if isinstance(a, dict)]
    if not files:
        return content
    parts = [f"<file name=\"{a.get('name', 'file')}\">\n{a.get('text', '')}\n</file>" for a in files]
    return "\n\n".join(parts + ([content] if content else []))


def valid_attachments(value) -> bool:
    """The history's and an imported file's check of `meta["attachments"]`."""
    return isinstance(value, list) and all(
        isinstance(a, dict) and isinstance(a.get("name"), str) and isinstance(a.get("text"), str)
        and a.get("kind", "text") in ("text", "pdf") for a in value)
