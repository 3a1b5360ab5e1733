"""In the window, on the demo model: a chat is titled from its first exchange once its first reply ends (a
rename made while that reply streams stays), each message shows its time, and the sidebar's search finds
chats by their messages' text and stays filtered while replies end."""

from app.chat_titles import auto_title
from app.state.settings import Settings
from tests.app_support import LONG, SUM, ask, finish, hold, make_window

FIRST = "Hi! Can you please tell me, counting apples, what 45 + 23 is?"


def titles(w) -> list[str]:
    return [w.sidebar.list.item(i).text() for i in range(w.sidebar.list.count())]


def test_titles_times_and_search_in_the_window(qtbot, tmp_path, gate):
    w = make_window(qtbot, tmp_path / "data", Settings(max_new_tokens=24))
    c = w.controller
    h = c.history

    # a first message names the chat for now; the user renames it while its reply streams: theirs stays
    reply, controls = hold(qtbot, w, gate, "Quick", at=3, question=FIRST)
    first = c.chats.current
    assert titles(w) == [auto_title(FIRST)] and h.conversation(first).title_by is None
    c.chats.rename(first, "My sums")
    gate.at = None
    finish(qtbot, w, controls)
    assert h.conversation(first).title == "My sums" and h.conversation(first).title_by == "user"

    # a new chat: its title is made once its first reply ends, and only then is final
    w.new_chat()
    ask(qtbot, w, SUM, "Off", timeout=LONG)
    second = c.chats.current
    assert h.conversation(second).title_by == "auto"
    assert h.conversation(second).title == auto_title(SUM) == "What is 45 + 23 - 17 + 9"
    qtbot.waitUntil(lambda: "What is 45 + 23 - 17 + 9" in titles(w), timeout=60000)
    ask(qtbot, w, "And 2 + 2?", "Off", timeout=LONG)  # a later reply never retitles it
    assert h.conversation(second).title == "What is 45 + 23 - 17 + 9"

    # every message shows its time, the reply's once it has ended
    labels = [m.when_label for m in w.chat.widgets]
    assert len(labels) == 4 and all(not label.isHidden() and label.text() and label.toolTip() for label in labels)

    # the search finds the first chat by a word of its message (not of its title) and says where
    w.sidebar.search.setText("APPLES")
    qtbot.waitUntil(lambda: len(titles(w)) == 1, timeout=60000)
    assert titles(w)[0].startswith("My sums\n") and "counting apples" in titles(w)[0]
    ask(qtbot, w, "And 3 + 3?", "Off", timeout=LONG)  # a reply ending refreshes the list: still filtered
    assert len(titles(w)) == 1 and titles(w)[0].startswith("My sums")
    w.sidebar.search.setText("")
    qtbot.waitUntil(lambda: len(titles(w)) == 2, timeout=60000)
    w.close()
