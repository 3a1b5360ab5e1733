"""Syntax highlighting of code blocks with Pygments (no Qt): code as HTML with inline colours, which a
QLabel shows as rich text. Only a block that names its language is highlighted (guessing is slow and
often wrong); a block too long to highlight quickly, or in a language Pygments does not know, is
shown plain, escaped."""

from __future__ import annotations

import functools
import html

MAX_HIGHLIGHT_CHARS = 100_000  # a block longer than this is shown plain (Pygments takes ~ms per KB)
STYLES = {False: "default", True: "github-dark"}  # light and dark themes


@functools.lru_cache(maxsize=64)
def _formatter(dark: bool):
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style=STYLES[dark], noclasses=True, nowrap=True)


def highlighted_html(code: str, language: str, dark: bool) -> str:
    """`code` as HTML for a QLabel: a <pre> block, coloured when `language` is one Pygments knows."""
    body = None
    if language and len(code) <= MAX_HIGHLIGHT_CHARS:
        from pygments import highlight
        from pygments.lexers import get_lexer_by_name
        from pygments.util import ClassNotFound

        try:
            lexer = get_lexer_by_name(language.lower(), stripnl=False, ensurenl=False)
        except ClassNotFound:
            lexer = None
        if lexer is not None:
            body = highlight(code, lexer, _formatter(dark))
    if body is None:
        body = html.escape(code)
    return f'<pre style="margin:0; white-space:pre-wrap">{body}</pre>'
