"""What the chat shows is what was written (a real-window session found a HIGH here: a reply's "$5 for tea and
$10 for cake" showed as "5 for tea and10 for cake", slanted, its dollars gone, so a price answer read wrong).
A reply's markdown keeps prices, products and code as written (math between dollars follows pandoc's rule);
the user's own message is shown exactly as typed, as chat apps do: markdown read "3*4*5", "C:\\Users\\*name"
and "$5 … $10" in it as italics, escapes and math. Checked as Qt renders the text given to it."""

import pytest
from PySide6.QtCore import Qt

from app.markdown_blocks import with_readable_math
from tests.app.test_angles_shown import shown  # a block as the chat renders it, read back as plain text


@pytest.mark.parametrize("text", [
    "I paid $5 for tea and $10 for cake, so $15 in all.",
    "It costs $5-$10 a month, or $100/year.",
    "Prices: $3.50, $4 and $12.99.",
    "between $5 and $ 10",
    "The box is 3*4*5 = 60 cm3.",
    "(2+3)*4 = 20 and 2*(3+4) = 14",
    "US$5 and $$ alone",
])
def test_prices_and_products_in_a_reply_show_as_written(text, qapp):
    assert shown(text) == text


@pytest.mark.parametrize("text, expected", [
    ("so $E = mc^2$ here", "so E = mc² here"),  # math still reads as math
    ("$x$ and $y_1$", "x and y₁"),
    ("a price $5 then math $x^2$", "a price $5 then math x²"),
    ("`echo $HOME $PATH` stays", "echo $HOME $PATH stays"),  # a code span as written
    ("`3*4*5` and **bold**", "3*4*5 and bold"),
])
def test_math_code_and_markup_keep_their_meaning(text, expected, qapp):
    assert shown(text) == expected


def test_pandocs_closing_rule():
    assert with_readable_math("$5 and $10") == "$5 and $10"  # the second $ has a space before it
    assert with_readable_math("$5-$10") == "$5-$10"  # a digit after the closing $
    assert with_readable_math("$a$b") == "*a*b"


@pytest.mark.parametrize("text", [
    r"Path C:\Users\*name\_x and \\server\share",
    "I paid $5 for tea and $10 for cake, so 3*4*5 = 60 and 2*x*y",
    "a_b_c and __init__ and **not bold** and # not a heading",
    "<b>typed</b> and vector<int> and &amp; &lt;",
    "```\ncode I pasted\n```",
    "  indented\n\n\nthree lines apart",
])
def test_the_users_message_shows_exactly_as_typed(qtbot, text):
    from types import SimpleNamespace

    from app.widgets.chat_view import ChatView

    view = ChatView()
    qtbot.addWidget(view)
    view.show_chat(1, [SimpleNamespace(id=1, role="user", content=text, thinking="", meta={}, versions=(),
                                       time=None)], None)
    body = view.widgets[0].content.itemAt(0).widget()
    assert view.widgets[0].content.count() == 1 and body.textFormat() == Qt.TextFormat.PlainText
    assert body.text().replace("\u200b", "") == text
