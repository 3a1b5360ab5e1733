"""History storage (schema migration, soft delete, search), settings, and streaming markdown."""

import json
import sqlite3

import pytest

from app.markdown_blocks import finish_blocks, readable_math, split_blocks, with_readable_math
from app.state.history import History, HistoryReadOnly
from app.state.history_schema import MIGRATIONS, SCHEMA_VERSION
from app.state.settings import Settings


def test_an_old_database_is_migrated_with_its_data(tmp_path):
    path = tmp_path / "history.sqlite3"
    db = sqlite3.connect(str(path))
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for statement in MIGRATIONS[1]:
        db.execute(statement)
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.execute("INSERT INTO conversations (title, created, updated) VALUES ('old chat', 1, 1)")
    db.execute("INSERT INTO messages (conversation_id, role, content, created) VALUES (1, 'user', 'hi', 1)")
    db.commit()
    db.close()
    h = History(path)
    assert h.version() == SCHEMA_VERSION == 4
    assert [c.title for c in h.conversations()] == ["old chat"]
    assert h.messages(1)[0].content == "hi"
    h.delete(1)  # the column version 2 added
    assert h.conversations() == []


def test_reply_details_saved_by_earlier_versions_read_as_the_events_serialise_them(tmp_path):
    """Before one serialisation per event, a saved switch said `tokens`, the thinkers were [name, count]
    pairs and the reply's time was `total_ms`; they read as Switch/Progress.to_dict write them now."""
    h = History(tmp_path / "history.sqlite3")
    cid = h.new_conversation("c").id
    switch = {"from": "0.5M", "to": "1.5M", "tokens": 40, "ms": 12.5, "reason": "answer"}
    old = {"think_submodel": "0.5M", "thinking_tokens": 17, "total_ms": 900.0, "switch": switch,
           "switches": [{**switch, "reason": "depth"}, switch], "thinking_by_submodel": [["0.5M", 5], ["1.0M", 12]]}
    mid = h.add_message(cid, "assistant", "ok", meta=old).id
    repeated = h.add_message(cid, "assistant", "ok", meta={"thinking_by_submodel": [["0.5M", 5], ["0.5M", 12]]}).id
    h.close()
    h = History(tmp_path / "history.sqlite3")
    try:
        meta = {m.id: m.meta for m in h.messages(cid)}
        new = {"from": "0.5M", "to": "1.5M", "reprefill_tokens": 40, "ms": 12.5, "reason": "answer"}
        assert meta[mid] == {"think_submodel": "0.5M", "thinking_tokens": 17, "elapsed_ms": 900.0, "switch": new,
                             "switches": [{**new, "reason": "depth"}, new],
                             "thinking_by_submodel": {"0.5M": 5, "1.0M": 12}}
        assert meta[repeated] == {}  # not a record this app wrote: dropped as damaged
    finally:
        h.close()


def test_a_newer_database_opens_read_only_and_is_never_migrated_down(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    h.db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    h.close()
    h = History(tmp_path / "h.sqlite3")  # more variants in tests/test_app_data_files.py
    assert "newer Elastic Chat" in h.read_only and h.notices
    with pytest.raises(HistoryReadOnly, match="read-only"):
        h.add_message(1, "user", "hi")
    h.close()
    assert sqlite3.connect(str(tmp_path / "h.sqlite3")).execute("SELECT value FROM meta").fetchone() == ("99",)


def test_messages_search_delete_undo_purge(tmp_path):
    h = History(tmp_path / "h.sqlite3")
    a = h.new_conversation("Sums")
    b = h.new_conversation("Talk")
    h.add_message(a.id, "user", "What is 2 + 2?")
    m = h.add_message(a.id, "assistant", "", complete=False)
    h.update_message(m.id, "4", "2 + 2 = 4.", complete=False)
    assert not h.messages(a.id)[1].complete and h.messages(a.id)[1].thinking == "2 + 2 = 4."
    h.update_message(m.id, "4.", "2 + 2 = 4.", {"answer_submodel": "1.5M"}, complete=True)
    assert h.messages(a.id)[1].meta == {"answer_submodel": "1.5M"}
    assert [c.title for c in h.conversations("2 + 2")] == ["Sums"]
    h.delete(b.id)
    assert [c.id for c in h.conversations()] == [a.id]
    h.undelete(b.id)
    h.delete(b.id)
    assert h.purge_deleted() == 1
    h.delete_messages_from(a.id, m.id)
    assert [x.role for x in h.messages(a.id)] == ["user"]
    assert "**user**" in h.export_text(a.id)


def test_settings_round_trip_and_a_damaged_file(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(theme="dark", font_size=14)
    s.sampling.temperature = 0.2
    s.save(path)
    again = Settings.load(path)
    assert again.theme == "dark" and again.sampling.temperature == 0.2 and not again.problem
    path.write_text("{broken")
    fallback = Settings.load(path)
    assert fallback.theme == "system" and "could not be read" in fallback.problem
    assert (tmp_path / "settings.broken").exists()
    path.write_text(json.dumps({"theme": "light", "unknown_key": 1}))
    assert Settings.load(path).theme == "light"


def _shape(blocks):
    return [(b.kind, b.text, b.language) for b in blocks]


def test_blocks_are_final_only_when_closed():
    blocks, tail = split_blocks("Intro line\n\n```python\nprint(1)\n")
    assert _shape(blocks) == [("text", "Intro line", "")] and tail.startswith("```python")
    blocks, tail = split_blocks("Intro line\n\n```python\nprint(1)\n```\n\nstill typ")
    assert _shape(blocks) == [("text", "Intro line", ""), ("code", "print(1)", "python")] and tail == "still typ"
    assert _shape(finish_blocks("a\n\n```\nx")) == [("text", "a", ""), ("code", "x", "")]


LISTS_AND_TABLES = """Steps:

1. Install it:

   ```bash
   pip install x
   ```

2. Run it.

| a | b |
|---|---|
| 1 | 2 |

Done.
"""


def test_lists_with_fences_and_tables_are_one_block_each():
    blocks = finish_blocks(LISTS_AND_TABLES)
    assert [b.kind for b in blocks] == ["text", "text", "text", "text"]
    assert "```bash" in blocks[1].text and "2. Run it." in blocks[1].text  # the fence stays in its list
    assert blocks[2].text.startswith("| a | b |") and blocks[2].text.endswith("| 1 | 2 |")


def test_streaming_renders_each_block_once_and_resuming_parses_the_same():
    final = _shape(finish_blocks(LISTS_AND_TABLES))
    done: list = []
    for n in range(len(LISTS_AND_TABLES) + 1):  # every prefix, as the reply streams in
        blocks, tail = split_blocks(LISTS_AND_TABLES[:n])
        assert _shape(blocks) == final[:len(blocks)]  # a block once final never changes
        assert len(blocks) >= len(done)
        start = done[-1].end if done else 0
        more, again = split_blocks(LISTS_AND_TABLES[:n], start)  # resumed after the last final block
        assert _shape(done + more) == _shape(blocks) and again == tail
        done = blocks
    assert len(done) == len(final) - 1  # the last block is the tail until the reply ends


def test_math_is_shown_readably():
    assert readable_math(r"\frac{a}{b} \times x^{2} \le \sqrt{y}") == "(a)/(b) × x² ≤ √(y)"
    assert with_readable_math(r"so $E = mc^2$ costs $5") == "so *E = mc²* costs $5"
