"""The sidebar's search (app/state/history_search.py): chats whose title or messages hold every word, with
where each matches; the query is the user's text, never SQL nor a pattern."""


import pytest

from app.state.history import History
from app.state.history_search import MAX_QUERY, search_words
from tests.history_support import version_3_history


@pytest.fixture
def history(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    chats = {}
    for title, texts in (("Sums", ["What is 45 + 23?", "68"]),
                         ("Trip", ["Pack the tent and the 100% wool socks", "Also a_b_c labels"]),
                         ("Русский", ["ПРИВЕТ, как дела?", "Хорошо"]),
                         ("Quotes", ['He said "hello world" twice', "ok"]),
                         ("日本語", ["東京の天気はどうですか", "晴れです"]),
                         ("Walk", ["Die Straße hinunter, café TERRACE", r"C:\temp\a_b.txt"])):
        cid = h.new_conversation(title).id
        for i, text in enumerate(texts):
            h.add_message(cid, "user" if i % 2 == 0 else "assistant", text)
        chats[title] = cid
    h.new_conversation("Empty")
    yield h
    h.close()


def titles(h: History, query: str) -> list[str]:
    return sorted(c.title for c in h.conversations(query))


def test_message_text_is_searched_and_the_result_says_where(history):
    assert titles(history, "tent") == ["Trip"]  # not in its title: in a message
    found = history.conversations("WOOL socks")  # every word, any case
    assert [c.title for c in found] == ["Trip"] and "wool socks" in found[0].match
    assert titles(history, "tent sums") == []  # every word must be in the chat
    assert titles(history, "sums")[0] == "Sums" and history.conversations("sums")[0].match == ""  # the title says it
    assert titles(history, "привет") == ["Русский"]  # case folded beyond ASCII
    assert titles(history, "天気") == ["日本語"]  # a word inside a sentence without spaces
    assert len(titles(history, "")) == len(titles(history, "   ")) == 7
    # folded as Python folds, on texts with other characters than ASCII too
    assert titles(history, "STRASSE") == titles(history, "straße") == titles(history, "terrace") == ["Walk"]


@pytest.mark.parametrize("query, expected", [
    ("%", ["Trip"]), ("100%", ["Trip"]), ("_", ["Trip", "Walk"]), ("a_b", ["Trip", "Walk"]), ("a%b", []),
    ("%%%", []), ("___", []), ("\\", ["Walk"]), ("\\temp\\a_b", ["Walk"]), ("\\%", []), ("c_t", []),
    ('"hello world"', ["Quotes"]), ('"world hello"', []), ('"', ["Quotes"]), ('""', []), ('"hello', ["Quotes"]),
    ("tent*", []), ("NEAR(tent socks)", []), ("tent OR sums", []), ("' OR 1=1 --", []),
    ("x" * 100_000, []), ("tent " * 5000, ["Trip"]),
])
def test_the_query_is_text_never_a_pattern_nor_sql(history, query, expected):
    assert titles(history, query) == expected


def test_a_long_query_is_cut(history):
    assert len(search_words("ab " * 10_000)) == 1 and len(" ".join(search_words("x" * 10**6))) == MAX_QUERY
    assert len(search_words(" ".join(f"w{i}" for i in range(100)))) == 8


def test_a_version_3_history_is_searched_after_its_migration(tmp_path):
    path = tmp_path / "history.sqlite3"
    db = version_3_history(path)
    db.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 'old', 1, 1)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created, parent_id)"
               " VALUES (1, 'user', 'the quarterly Report', 1, 0)")
    db.commit()
    db.close()
    h = History(path)
    try:
        found = h.conversations("report")
        assert [c.title for c in found] == ["old"] and "quarterly Report" in found[0].match
    finally:
        h.close()


def test_the_sidebar_shows_where_each_result_matches(qtbot, history):
    from PySide6.QtCore import Qt

    from app.widgets.sidebar import Sidebar

    bar = Sidebar()
    qtbot.addWidget(bar)
    with qtbot.waitSignal(bar.sig_search, timeout=60000) as asked:  # once typing pauses
        bar.search.setText("sums")
        bar.search.setText("tent")
    assert asked.args == ["tent"]
    bar.set_conversations(history.conversations("tent"), None)
    item = bar.list.item(0)
    assert bar.list.count() == 1 and item.text().startswith("Trip\n") and "tent" in item.text()
    assert not item.flags() & Qt.ItemFlag.ItemIsEditable  # its text is not only its title
    bar.set_conversations(history.conversations("trip"), None)  # matched by its title alone
    assert bar.list.item(0).text() == "Trip" and bar.list.item(0).flags() & Qt.ItemFlag.ItemIsEditable
