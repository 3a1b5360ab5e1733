"""Text in "<...>" shows as written in the chat: Qt's markdown read "<int>" in "vector<int>", XML and a tool
call's closing tags as HTML and dropped them, so a message or an answer showed with words missing ("I use
std::vectorstd::map<K,V>", found in a real-window session). Checked as the chat renders a block: the
markdown given to Qt, read back as the plain text it shows."""

import pytest
from PySide6.QtGui import QTextDocument

from app.markdown_blocks import breakable, shown_markdown


def shown(markdown: str) -> str:
    doc = QTextDocument()
    doc.setMarkdown(breakable(shown_markdown(markdown), True))
    return doc.toPlainText().replace("\u200b", "")


@pytest.mark.parametrize("text", [
    "I use std::vector<int> v; and it works",
    "Vec<u8> and HashMap<String, Vec<u8>> in Rust",
    "Array<string> | Promise<void> in TypeScript",
    "List<Map<String, Integer>> in Java",
    "<note><to>Tove</to></note>",
    "done</parameter></function></tool_call>",
    "a <b>bold</b> tag and a line<br>break",
    "if a < b and c > d then <<shift>>",
    "a <!-- comment --> between",
    "std::vector<std::vector<std::pair<int, int>>> runs_of_many_characters_without_any_space",
])
def test_angle_brackets_show_as_written(text, qapp):
    assert shown(text) == text


@pytest.mark.parametrize("text, expected", [
    ("see `std::map<K,V>` here", "see std::map<K,V> here"),  # a code span: its text as written
    ("``a<b>`` and <i>", "a<b> and <i>"),
    ("go to <https://example.com/a?b=1> now", "go to https://example.com/a?b=1 now"),  # an autolink stays one
    ("**bold** and vector<int>", "bold and vector<int>"),  # the rest of markdown still applies
])
def test_code_spans_links_and_markup_keep_their_meaning(text, expected, qapp):
    assert shown(text) == expected


def test_the_chat_renders_a_replys_blocks_so(qtbot):
    from types import SimpleNamespace

    from app.widgets.chat_view import ChatView

    view = ChatView()
    qtbot.addWidget(view)
    text = "I use std::vector<int> v;\n\nand </function> too"
    view.show_chat(1, [SimpleNamespace(id=1, role="assistant", content=text, thinking="", meta={}, versions=(),
                                       time=None)], None)
    labels = [w for w in view.widgets[0].findChildren(type(view.widgets[0].info).__mro__[1]) if w.text()]
    rendered = [w.text() for w in labels if "vector" in w.text() or "function" in w.text()]
    doc = QTextDocument()
    doc.setMarkdown("\n\n".join(rendered))
    assert "std::vector<int> v;" in doc.toPlainText() and "</function>" in doc.toPlainText()
