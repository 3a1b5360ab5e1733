"""A chat's automatic title (no Qt): a few words from its first exchange, made without asking the model.

Why not the model: a second generation per chat costs the user a reply's time on a busy PC, and the
bundled demo only does sums (it would title every chat with a number). The first message says what the
chat is about in the user's own words; its markdown, code, links and filler ("hi, can you please") are
stripped, and the words kept up to MAX_CHARS. When nothing is left (code only, a file only, an empty
message), the title falls back, in order, to the attached files' names, the code's language, the
reply's first words, and the chat's date. A long message gives its first line that has words. The same
inputs always give the same title.
"""

from __future__ import annotations

import re
import time

MAX_CHARS = 40
FENCE = re.compile(r"^ {0,3}(```|~~~)[ \t]*([^\s`]*)[^\n]*\n.*?(?:^ {0,3}\1[ \t]*$|\Z)", re.M | re.S)
INLINE_CODE = re.compile(r"`+([^`\n]*)`+")
LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")  # [text](url) keeps its text; an image keeps its alt
URL = re.compile(r"\bhttps?://\S+|\bwww\.\S+")
# block marks at a line's start (headings, quotes, list items), emphasis marks beside a word, table pipes
MARKUP = re.compile(r"^ {0,3}(#{1,6}\s+|>\s?|[-*+]\s+|\d+[.)]\s+)|(?<!\w)(?:[*_]+|~~+)|(?:[*_]+|~~+)(?!\w)|\|",
                    re.M)  # (a single "~" is "about", "~5 minutes": it stays)
# Openings that say nothing about the chat, longest first; matched case-insensitively at the start only.
FILLER = ("hello", "hi", "hey", "good morning", "good evening", "please", "could you", "can you", "would you",
          "i want you to", "i would like you to", "i'd like you to", "i need you to", "help me", "tell me",
          "quick question", "ok", "okay", "so")
FILLER_RE = re.compile(r"^(?:(?:" + "|".join(re.escape(f) for f in sorted(FILLER, key=len, reverse=True))
                       + r")\b[\s,.:;!?-]*)+", re.I)


def auto_title(user_text: str, file_names: list[str] | None = None, reply_text: str = "",
               when: float | None = None) -> str:
    """A title of at most MAX_CHARS characters for a chat that began with `user_text` (with the files
    `file_names` attached) and whose first reply said `reply_text`; `when` (epoch seconds) dates the
    last fallback. Never empty."""
    words = prose(user_text)
    if words:
        return shortened(words)
    names = [n.strip() for n in file_names or [] if n and n.strip()]
    if names:
        return shortened(names[0] + (f" and {len(names) - 1} more" if len(names) > 1 else ""))
    languages = [m.group(2) for m in FENCE.finditer(user_text or "") if m.group(2)]
    if languages:
        return shortened(f"{languages[0][:1].upper()}{languages[0][1:]} code")
    if FENCE.search(user_text or ""):
        return "Code"
    words = prose(reply_text)
    if words:
        return shortened(words)
    return "Chat of " + time.strftime("%d %b %Y, %H:%M", time.localtime(time.time() if when is None else when))


def prose(text: str) -> str:
    """The first line of `text` that has words once code blocks, links' targets, markdown marks and an
    opening's filler are removed (inline code keeps its text), in single spaces; "" when none has."""
    text = FENCE.sub("\n", text or "")
    text = INLINE_CODE.sub(r"\1", text)
    text = LINK.sub(r"\1", text)
    text = URL.sub(" ", text)
    text = MARKUP.sub(" ", text)
    for line in text.splitlines():
        line = "".join(c if c.isprintable() else " " for c in line)  # control and format characters (bidi marks)
        line = FILLER_RE.sub("", " ".join(line.split())).strip(" ,.:;!?-")
        if any(c.isalnum() for c in line):
            return line[:1].upper() + line[1:]
    return ""


def shortened(text: str) -> str:
    """`text` cut to MAX_CHARS at a word's end where there is one (an ellipsis says it was cut); a script
    written without spaces (Chinese, Japanese) is cut by characters."""
    text = " ".join(text.split()).rstrip(" ,.:;!?-")
    if len(text) <= MAX_CHARS:
        return text
    cut = text[:MAX_CHARS - 1]
    space = cut.rfind(" ")
    if space >= MAX_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip(" ,.:;!?-") + "…"
