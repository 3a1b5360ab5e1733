"""The app's own data files as hostile input, one class per kind: a damaged history.sqlite3, one
that must open read-only, chats whose stored JSON is bad, settings.json values, and the data folder
itself. Each runs the real open paths (History(...), Settings.load, prepare_data_folder) on several
variants; the last tests open the real window (and the real `main()`) on damaged files."""

import dataclasses
import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from app.state.data_files import LOG, DataFolder, check_data_files, prepare_data_folder
from app.state.history import History, HistoryReadOnly
from app.state.settings import Sampling, Settings
from tests.app_support import make_window
from tests.paths import ROOT


def make_history(path: Path, chats: int = 3, messages: int = 20, size: int = 300) -> dict[str, list[str]]:
    """A history with known content: {title: [message texts]}."""
    h = History(path)
    content = {}
    for i in range(chats):
        c = h.new_conversation(f"chat {i}", settings={"sampling": {"temperature": 0.3}})
        content[c.title] = [f"message {i}.{j} " + "x" * size for j in range(messages)]
        for text in content[c.title]:
            h.add_message(c.id, "user", text)
    h.close()
    return content


def everything(h: History) -> dict[str, list[str]]:
    return {c.title: [m.content for m in h.messages(c.id)] for c in h.conversations()}


def assert_usable(h: History) -> None:
    """The app can go on: list, open, write a chat, and close."""
    for c in h.conversations():
        h.messages(c.id)
    conv = h.new_conversation()
    h.add_message(conv.id, "user", "still works")
    assert h.messages(conv.id)[0].content == "still works"


def asides(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if ".unreadable-" in p.name and p.name.endswith(".sqlite3"))


# ---------------------------------------------------------------------- damaged history files

def _garbage(p):
    p.write_bytes(os.urandom(8192))


def _text_file(p):
    p.write_text("these are my notes, not a database\n" * 100)


def _truncated_mid_page(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) * 3 // 5 + 1234])


def _damaged_page(p):
    data = bytearray(p.read_bytes())
    middle = len(data) // 4096 // 2
    data[middle * 4096:(middle + 1) * 4096] = os.urandom(4096)
    p.write_bytes(bytes(data))


def _damaged_header(p):
    data = bytearray(p.read_bytes())
    data[16:18] = (3).to_bytes(2, "big")  # a page size that is not a power of two
    p.write_bytes(bytes(data))


def _another_programs_database(p):
    p.unlink()
    db = sqlite3.connect(str(p))
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    db.execute("INSERT INTO invoices (total) VALUES (12.5)")
    db.commit()
    db.close()


def _version_not_a_number(p):
    db = sqlite3.connect(str(p))
    db.execute("UPDATE meta SET value='two' WHERE key='schema_version'")
    db.commit()
    db.close()


def _tables_not_ours(p):
    db = sqlite3.connect(str(p))
    db.execute("ALTER TABLE messages RENAME COLUMN content TO body")  # says version 2, is not
    db.commit()
    db.close()


def _a_folder(p):
    p.unlink()
    p.mkdir()
    (p / "inside.txt").write_text("kept")


def _a_named_pipe(p):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    p.unlink()
    os.mkfifo(p)  # opening it for reading would wait forever


DAMAGED = {
    "garbage bytes": (_garbage, False),
    "a text file": (_text_file, False),
    "truncated mid-page": (_truncated_mid_page, True),
    "a damaged page": (_damaged_page, True),
    "a damaged header": (_damaged_header, False),
    "another program's database": (_another_programs_database, False),
    "a schema version that is not a number": (_version_not_a_number, True),
    "tables that are not ours": (_tables_not_ours, True),
    "a folder in its place": (_a_folder, False),
    "a named pipe in its place": (_a_named_pipe, False),
}


class TestDamagedHistory:
    @pytest.mark.parametrize("damage", DAMAGED, ids=list(DAMAGED))
    def test_it_is_moved_aside_a_new_history_starts_and_readable_chats_are_recovered(self, tmp_path, damage):
        path = tmp_path / "history.sqlite3"
        original = make_history(path)
        spoil, recoverable = DAMAGED[damage]
        spoil(path)
        before = path.read_bytes() if path.is_file() else None
        h = History(path)
        try:
            assert not h.read_only
            assert len(h.notices) == 1 and "moved aside to history.unreadable-" in h.notices[0], h.notices
            [aside] = asides(tmp_path)
            assert h.moved_aside == aside and aside.name in h.notices[0]
            if aside.is_fifo():
                pass
            elif before is not None:
                assert aside.read_bytes() == before  # kept byte for byte: nothing the user had is lost
            else:
                assert (aside / "inside.txt").read_text() == "kept"
            recovered = everything(h)
            for title, texts in recovered.items():  # whatever came back is the user's text, not garbage
                if damage != "tables that are not ours":  # (its texts are in a column this version does not read)
                    assert set(texts) <= set(original.get(title, sum(original.values(), [])))
            if recoverable:
                assert recovered and "Recovered from it" in h.notices[0]
            assert_usable(h)
        finally:
            h.close()
        again = History(path)  # the new history opens cleanly next time
        assert not again.notices and not again.read_only
        again.close()

    def test_salvage_steps_over_damaged_pages(self, tmp_path):
        path = tmp_path / "history.sqlite3"
        original = make_history(path, chats=1, messages=200, size=1000)
        data = bytearray(path.read_bytes())
        pages = len(data) // 4096
        for page in (pages // 3, 2 * pages // 3):
            data[page * 4096:(page + 1) * 4096] = os.urandom(4096)
        path.write_bytes(bytes(data))
        h = History(path)
        [texts] = everything(h).values()
        assert 150 <= len(texts) < 200 and set(texts) <= set(original["chat 0"])
        assert "some parts could not be read" in h.notices[0]
        h.close()

    def test_a_zero_length_file_is_a_new_history_with_a_notice(self, tmp_path):
        path = tmp_path / "history.sqlite3"
        path.write_bytes(b"")
        h = History(path)
        assert h.notices == ["history.sqlite3 was empty (0 bytes, no chats in it); a new history was started."]
        assert_usable(h)
        h.close()

    def test_a_crash_left_wal_and_shm_and_its_chats_are_all_there(self, tmp_path):
        path = tmp_path / "history.sqlite3"
        script = ("import os, sys; sys.path.insert(0, %r)\n"
                  "from app.state.history import History\n"
                  "h = History(%r); c = h.new_conversation('before the crash')\n"
                  "[h.add_message(c.id, 'user', f'm{i}') for i in range(50)]\n"
                  "os._exit(0)  # no close, no checkpoint: the commits live in the -wal\n" % (str(ROOT), str(path)))
        subprocess.run([sys.executable, "-c", script], check=True)
        assert Path(f"{path}-wal").stat().st_size > 0
        h = History(path)
        assert everything(h) == {"before the crash": [f"m{i}" for i in range(50)]} and not h.notices
        h.close()

    @pytest.mark.parametrize("journal", ["-wal", "-shm"])
    def test_a_garbage_journal_next_to_a_good_file_loses_nothing(self, tmp_path, journal):
        path = tmp_path / "history.sqlite3"
        original = make_history(path)
        Path(f"{path}{journal}").write_bytes(os.urandom(40000))
        h = History(path)
        assert everything(h) == original and not h.read_only
        assert_usable(h)
        h.close()

    def test_a_journal_without_its_database_is_kept_aside(self, tmp_path):
        path = tmp_path / "history.sqlite3"
        wal = Path(f"{path}-wal")
        wal.write_bytes(b"orphan journal " * 100)
        h = History(path)
        assert "left without its database" in h.notices[0]
        assert [p.read_bytes() for p in tmp_path.glob("*.unreadable-*-wal")] == [b"orphan journal " * 100]
        assert_usable(h)
        h.close()


# ---------------------------------------------------------------------- histories that must open read-only

def _lock_file(path: Path, undo: list) -> None:
    """Makes `path` (a file or folder) unwritable for this process: chmod for a normal user, the
    immutable flag for root (which chmod does not stop). Skips when neither works here."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        undo.append(lambda: path.chmod(mode))
    elif subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0:
        undo.append(lambda: subprocess.run(["chattr", "-i", str(path)], check=True))
    else:
        pytest.skip("cannot make a file read-only here")
    probe = path / ".probe" if path.is_dir() else path
    try:
        with open(probe, "ab"):
            pass
    except OSError:
        return
    pytest.skip("the file system lets this user write a read-only file")


@pytest.fixture
def lock():
    undo = []
    yield lambda path: _lock_file(path, undo)
    for step in reversed(undo):
        step()


def _newer_schema(path: Path, lock) -> None:
    db = sqlite3.connect(str(path))
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.execute("ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")  # what 99 might add
    db.commit()
    db.close()


def _newer_schema_that_renamed_a_column(path: Path, lock) -> None:
    _newer_schema(path, lock)
    db = sqlite3.connect(str(path))
    db.execute("ALTER TABLE messages RENAME COLUMN content TO body")
    db.commit()
    db.close()


READ_ONLY = {
    "a read-only file": (lambda p, lock: lock(p), "the file cannot be written", True),
    "a read-only folder": (lambda p, lock: lock(p.parent), "its folder cannot be written", True),
    "a newer schema": (_newer_schema, "newer Elastic Chat (schema 99", True),
    "a newer schema with a renamed column": (_newer_schema_that_renamed_a_column, "newer Elastic Chat", False),
}


class TestReadOnlyHistory:
    @pytest.mark.parametrize("case", READ_ONLY, ids=list(READ_ONLY))
    def test_it_opens_read_only_shows_the_chats_and_refuses_writes(self, tmp_path, lock, case):
        folder = tmp_path / "data"
        folder.mkdir()
        path = folder / "history.sqlite3"
        original = make_history(path)
        make_read_only, reason, contents_readable = READ_ONLY[case]
        make_read_only(path, lock)
        before = path.read_bytes()
        h = History(path)
        try:
            assert reason in h.read_only and len(h.notices) == 1 and h.read_only in h.notices[0]
            assert "New messages cannot be saved" in h.notices[0]
            shown = everything(h)
            assert set(shown) == set(original)  # every chat is listed
            if contents_readable:
                assert shown == original
                assert h.conversations()[0].settings == {"sampling": {"temperature": 0.3}}
            cid = h.conversations()[0].id
            for write in (lambda: h.add_message(cid, "user", "hi"), lambda: h.rename(cid, "x"),
                          lambda: h.delete(cid), lambda: h.update_settings(cid, "", {}),
                          lambda: h.delete_messages_from(cid, 1), lambda: h.update_message(1, "a", "b")):
                with pytest.raises(HistoryReadOnly, match="Nothing was saved: history.sqlite3 is open read-only"):
                    write()
            assert h.purge_deleted() == 0
            assert h.new_conversation().title == "New chat"  # an empty chat to show, in memory only
        finally:
            h.close()
        assert path.read_bytes() == before and not asides(folder)  # the file is exactly as it was

    def test_a_folder_that_cannot_be_created_gives_an_empty_read_only_history(self, tmp_path):
        (tmp_path / "a-file").write_text("x")
        h = History(tmp_path / "a-file" / "data" / "history.sqlite3")
        assert "cannot be created" in h.read_only and "It holds no chats" in h.notices[0]
        assert h.conversations() == []
        h.new_conversation()
        h.close()
        h.close()  # closing twice is harmless


# ---------------------------------------------------------------------- chats whose stored JSON is bad

BAD_CHAT_JSON = {
    "settings not JSON": ("settings", "{nope"),
    "settings a JSON list": ("settings", "[1, 2]"),
    "settings a number": ("settings", 42),
    "settings bytes that are not text": ("settings", b"\xff\xfe\x00"),
    "sampling not an object": ("settings", json.dumps({"sampling": "hot"})),
    "temperature text": ("settings", json.dumps({"sampling": {"temperature": "hot", "top_p": 0.5}})),
    "top_k a fraction": ("settings", json.dumps({"sampling": {"top_k": 2.5}})),
    "top_p NaN": ("settings", '{"sampling": {"top_p": NaN}}'),
    "min_p negative": ("settings", json.dumps({"sampling": {"min_p": -1}})),
    "settings nested too deeply": ("settings", "[" * 100000 + "]" * 100000),
}
BAD_META = {
    "meta not JSON": "{oops",
    "meta a list": "[1, 2]",
    "meta tokens_per_s text": json.dumps({"tokens_per_s": "fast", "answer_submodel": "1.5M"}),
    "meta finish_reason a number": json.dumps({"finish_reason": 5, "thinking_ms": 120.0}),
    "meta thinking_ms Infinity": '{"thinking_ms": Infinity, "think_submodel": "1.0M"}',
    "meta switch a list": json.dumps({"switch": [1, 2]}),
}


class TestChatJson:
    @pytest.mark.parametrize("case", BAD_CHAT_JSON, ids=list(BAD_CHAT_JSON))
    def test_bad_chat_settings_fall_back_for_that_chat_only(self, tmp_path, case):
        path = tmp_path / "history.sqlite3"
        make_history(path, chats=2, messages=2)
        column, value = BAD_CHAT_JSON[case]
        db = sqlite3.connect(str(path))
        db.execute(f"UPDATE conversations SET {column}=? WHERE title='chat 0'", (value,))
        db.commit()
        db.close()
        h = History(path)
        by_title = {c.title: c for c in h.conversations()}
        assert by_title["chat 1"].settings == {"sampling": {"temperature": 0.3}}  # the other chat is untouched
        bad = by_title["chat 0"].settings
        assert isinstance(bad, dict) and isinstance(bad.get("sampling", {}), dict)
        # what the controller does with it: defaults, then this chat's valid values, then float()/int()
        sampling = {**vars(Sampling()), **bad.get("sampling", {})}
        assert all(math.isfinite(float(sampling[k])) for k in ("temperature", "top_p", "min_p"))
        assert int(sampling["top_k"]) == sampling["top_k"]
        assert any("“chat 0”" in n and "default settings" in n for n in h.notices), h.notices
        if case == "temperature text":
            assert bad["sampling"] == {"top_p": 0.5}  # the valid value of the same chat is kept
        assert_usable(h)
        h.close()

    @pytest.mark.parametrize("case", BAD_META, ids=list(BAD_META))
    def test_bad_reply_details_are_dropped_and_the_reply_still_shows(self, tmp_path, case):
        from app.widgets.chat_view import reply_info, thinking_summary

        path = tmp_path / "history.sqlite3"
        make_history(path, chats=1, messages=2)
        db = sqlite3.connect(str(path))
        db.execute("UPDATE messages SET meta=?, role='assistant' WHERE id=2", (BAD_META[case],))
        db.commit()
        db.close()
        h = History(path)
        [cid] = [c.id for c in h.conversations()]
        first, second = h.messages(cid)
        assert first.meta == {} and second.content.startswith("message 0.1")
        reply_info(second.meta), thinking_summary(second.meta)  # the chat view formats them without error
        if BAD_META[case] in ("{oops", "[1, 2]"):
            assert any("1 reply had details" in n for n in h.notices)
        h.close()

    def test_wrong_types_in_rows_are_shown_as_text(self, tmp_path):
        path = tmp_path / "history.sqlite3"
        make_history(path, chats=1, messages=1)
        db = sqlite3.connect(str(path))
        db.execute("UPDATE conversations SET title=123, updated='yesterday', system_prompt=?", (b"\xffprompt",))
        db.execute("UPDATE messages SET content=?, thinking=7, complete='maybe'", (b"caf\xc3\xa9 \xff",))
        db.commit()
        db.close()
        h = History(path)
        [conv] = h.conversations()
        assert (conv.title, conv.updated, conv.system_prompt) == ("123", 0.0, "\ufffdprompt")
        [m] = h.messages(conv.id)
        assert (m.content, m.thinking, m.complete) == ("café \ufffd", "7", True)
        assert "café" in h.export_text(conv.id)
        h.close()


# ---------------------------------------------------------------------- settings.json

GOOD = {"theme": "dark", "font_size": 14, "system_prompt": "Be brief.", "depth": "Deep", "max_new_tokens": 2048,
        "context": 16384, "active_model": "/models/x", "models_dir": "/models",
        "sampling": {"temperature": 0.2, "top_p": 0.9, "top_k": 40, "min_p": 0.05}}
BAD_VALUES = [
    ("theme", 5), ("theme", "purple"), ("theme", None),
    ("font_size", "big"), ("font_size", 11.5), ("font_size", 0), ("font_size", 10**9), ("font_size", True),
    ("system_prompt", 42), ("system_prompt", ["a"]), ("system_prompt", "x" * 200_001),
    ("depth", "Ultra"), ("depth", 3),
    ("max_new_tokens", -1), ("max_new_tokens", "1024"), ("max_new_tokens", 1e308), ("max_new_tokens", math.nan),
    ("context", 0), ("context", 10**12), ("context", math.inf),
    ("active_model", 5), ("active_model", "a\u0000b"), ("models_dir", {"x": 1}), ("models_dir", "bad\nline"),
    ("sampling", "hot"), ("sampling", [1]),
    ("sampling.temperature", "hot"), ("sampling.temperature", -1), ("sampling.temperature", math.inf),
    ("sampling.top_p", 0), ("sampling.top_p", 1.5), ("sampling.top_p", math.nan),
    ("sampling.top_k", 2.5), ("sampling.top_k", -3), ("sampling.top_k", False), ("sampling.min_p", 1.0),
]
BAD_FILES = {
    "not JSON": b"{broken",
    "a JSON list": b"[1, 2, 3]",
    "a JSON string": b'"dark"',
    "empty": b"",
    "not UTF-8": b'{"theme": "\xff\xfe"}',
    "nested too deeply": b"[" * 100000 + b"]" * 100000,
    "a number too long to parse": b'{"font_size": ' + b"9" * 5000 + b"}",
}


def _with(field: str, value) -> dict:
    data = json.loads(json.dumps(GOOD))
    if field.startswith("sampling."):
        data["sampling"][field.split(".")[1]] = value
    else:
        data[field] = value
    return data


def _value(s: Settings, field: str):
    return getattr(s.sampling, field.split(".")[1]) if field.startswith("sampling.") else getattr(s, field)


class TestBadSettings:
    @pytest.mark.parametrize("field,value", BAD_VALUES, ids=[f"{f}={str(v)[:20]}" for f, v in BAD_VALUES])
    def test_a_bad_value_falls_back_alone_and_says_so(self, tmp_path, field, value):
        path = tmp_path / "settings.json"
        path.write_text(json.dumps(_with(field, value)))
        before = path.read_bytes()
        s = Settings.load(path)
        default = Settings()
        if field == "sampling":
            assert s.sampling == default.sampling
        else:
            assert _value(s, field) == _value(default, field)
        for other in ("theme", "font_size", "system_prompt", "depth", "max_new_tokens", "context", "active_model",
                      "models_dir", "sampling.temperature", "sampling.top_p", "sampling.top_k", "sampling.min_p"):
            if other != field and not other.startswith(field + "."):
                expected = GOOD["sampling"][other[9:]] if other.startswith("sampling.") else GOOD[other]
                assert _value(s, other) == expected, other  # every other field keeps the user's value
        assert f"{field} is " in s.problem and "could not be used" in s.problem and "\n" not in s.problem
        assert (tmp_path / "settings.broken").read_bytes() == before  # the file as it was is kept
        assert path.read_bytes() == before
        assert s.save(path) == ""
        again = Settings.load(path)  # the next start is clean, with the same values
        assert not again.problem and again == dataclasses.replace(s, problem="")

    @pytest.mark.parametrize("case", BAD_FILES, ids=list(BAD_FILES))
    def test_an_unreadable_file_is_set_aside_and_defaults_are_used(self, tmp_path, case):
        path = tmp_path / "settings.json"
        path.write_bytes(BAD_FILES[case])
        s = Settings.load(path)
        assert s == Settings(problem=s.problem) and "could not be read" in s.problem
        assert (tmp_path / "settings.broken").read_bytes() == BAD_FILES[case] and not path.exists()

    def test_a_folder_in_place_of_the_file_and_an_earlier_broken_file_are_both_kept(self, tmp_path):
        path = tmp_path / "settings.json"
        (tmp_path / "settings.broken").write_text("an earlier one")
        path.mkdir()
        s = Settings.load(path)
        assert "could not be read" in s.problem
        assert (tmp_path / "settings.broken").read_text() == "an earlier one"
        assert len(list(tmp_path.glob("settings-*.broken"))) == 1
        assert s.save(path) == "" and Settings.load(path).problem == ""

    def test_a_named_pipe_in_place_of_the_file_is_set_aside_without_reading_it(self, tmp_path):
        if not hasattr(os, "mkfifo"):
            pytest.skip("no named pipes here")
        os.mkfifo(tmp_path / "settings.json")
        s = Settings.load(tmp_path / "settings.json")
        assert "not a regular file" in s.problem and (tmp_path / "settings.broken").is_fifo()

    def test_values_that_are_valid_but_unusual_are_accepted(self, tmp_path):
        (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"theme": "light"}).encode())
        assert Settings.load(tmp_path / "bom.json").theme == "light"  # as a Windows editor saves it
        path = tmp_path / "settings.json"
        path.write_text(json.dumps({"theme": " Dark ", "depth": "max", "font_size": 12.0, "max_new_tokens": 16,
                                    "sampling": {"temperature": 0, "top_p": 1}}))
        s = Settings.load(path)
        assert (s.theme, s.depth, s.font_size, s.max_new_tokens) == ("dark", "Max", 12, 16) and not s.problem
        assert isinstance(s.font_size, int) and s.sampling.temperature == 0.0

    def test_unknown_keys_are_kept_through_a_save(self, tmp_path):
        path = tmp_path / "settings.json"
        path.write_text(json.dumps({"theme": "light", "future_option": [1, 2], "sampling": {"typical_p": 0.9}}))
        s = Settings.load(path)
        assert s.theme == "light" and not s.problem
        s.font_size = 20
        s.save(path)
        saved = json.loads(path.read_text())
        assert saved["future_option"] == [1, 2] and saved["sampling"]["typical_p"] == 0.9
        assert saved["font_size"] == 20 and "problem" not in saved

    def test_an_unreadable_file_that_cannot_be_set_aside_is_never_overwritten(self, tmp_path, lock):
        path = tmp_path / "settings.json"
        path.write_text("{damaged")
        lock(tmp_path)
        s = Settings.load(path)
        assert "could not be set aside" in s.problem and s.theme == "system"
        assert "not saved" in s.save(path) and path.read_text() == "{damaged"

    def test_saving_where_it_cannot_write_says_why_and_does_not_raise(self, tmp_path):
        (tmp_path / "a-file").write_text("x")
        assert "could not be saved" in Settings().save(tmp_path / "a-file" / "settings.json")
        path = tmp_path / "settings.json"
        (tmp_path / "settings.tmp").mkdir()  # a fixed temporary name taken: saving uses a fresh one instead
        assert Settings().save(path) == "" and path.is_file() and (tmp_path / "settings.tmp").is_dir()


# ---------------------------------------------------------------------- the data folder

class TestDataFolder:
    def test_a_writable_folder_is_used_as_it_is(self, tmp_path):
        data = prepare_data_folder(tmp_path / "new" / "data")
        assert data == DataFolder(tmp_path / "new" / "data", tmp_path / "new" / "data") and data.path.is_dir()
        assert not data.temporary and list(data.path.iterdir()) == []

    @pytest.mark.parametrize("case", ["a file", "under a file"])
    def test_a_path_that_is_a_file_falls_back_to_a_temporary_folder(self, tmp_path, case):
        (tmp_path / "f").write_text("mine")
        requested = tmp_path / "f" if case == "a file" else tmp_path / "f" / "data"
        data = prepare_data_folder(requested)
        try:
            assert data.temporary and data.path.is_dir() and data.requested == requested
            assert str(requested) in data.notice and str(data.path) in data.notice and "--data-dir" in data.notice
            assert (tmp_path / "f").read_text() == "mine"
            settings = Settings()
            check_data_files(data, settings)
            assert settings.problem == data.notice  # the window shows it
        finally:
            _remove_temp(data)

    def test_a_read_only_folder_falls_back_to_a_temporary_copy_of_the_chats(self, tmp_path, lock):
        folder = tmp_path / "data"
        folder.mkdir()
        original = make_history(folder / "history.sqlite3")
        Settings(theme="dark").save(folder / "settings.json")
        lock(folder)
        data = prepare_data_folder(folder)
        try:
            assert data.temporary and "copy of your chats and settings" in data.notice
            h = History(data.path / "history.sqlite3")
            assert everything(h) == original and not h.read_only
            h.close()
            assert Settings.load(data.path / "settings.json").theme == "dark"
        finally:
            _remove_temp(data)
        assert sorted(p.name for p in folder.iterdir()) == ["history.sqlite3", "settings.json"]

    def test_a_log_that_cannot_be_opened_is_moved_aside(self, tmp_path):
        import logging

        (tmp_path / LOG).mkdir()
        (tmp_path / LOG / "x").write_text("kept")
        data = prepare_data_folder(tmp_path)
        assert not data.temporary and "moved aside" in data.notice
        handler = logging.FileHandler(tmp_path / LOG)  # what logging.basicConfig in main() opens
        handler.close()
        [aside] = tmp_path.glob("elastic-chat.unwritable-*.log")
        assert (aside / "x").read_text() == "kept"

    def test_check_data_files_puts_every_notice_in_the_banner_text(self, tmp_path):
        (tmp_path / "history.sqlite3").write_bytes(os.urandom(5000))
        (tmp_path / "settings.json").write_text(json.dumps({"font_size": "huge"}))
        settings = Settings.load(tmp_path / "settings.json")
        notices = check_data_files(prepare_data_folder(tmp_path), settings)
        assert len(notices) == 2 and settings.problem == "\n".join(notices)
        assert "font_size" in notices[0] and "moved aside" in notices[1]
        h = History(tmp_path / "history.sqlite3")  # repaired once: the window's own open is clean
        assert not h.notices
        h.close()


def _remove_temp(data: DataFolder) -> None:
    import shutil

    if data.temporary:
        shutil.rmtree(data.path, ignore_errors=True)


# ---------------------------------------------------------------------- the real window and main()

@pytest.mark.slow
def test_the_window_opens_on_a_damaged_history_and_shows_what_was_done(qtbot, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    make_history(folder / "history.sqlite3", chats=2, messages=3)
    _truncated_mid_page(folder / "history.sqlite3")
    settings = Settings(max_new_tokens=160)
    check_data_files(prepare_data_folder(folder), settings)  # what main() does before the window
    w = make_window(qtbot, folder, settings)
    try:
        assert w.notes.error.isVisible() and "moved aside to history.unreadable-" in w.notes.error.text()
        assert w.sidebar.list.count() >= 1 and not w.controller.history.read_only
        assert len(asides(folder)) == 1
    finally:
        w.close()


@pytest.mark.slow
def test_the_window_opens_on_a_newer_history_read_only(qtbot, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    make_history(folder / "history.sqlite3", chats=2, messages=3)
    _newer_schema(folder / "history.sqlite3", None)
    before = (folder / "history.sqlite3").read_bytes()
    settings = Settings(max_new_tokens=160)
    check_data_files(prepare_data_folder(folder), settings)
    w = make_window(qtbot, folder, settings)
    try:
        assert "newer Elastic Chat" in w.notes.error.text() and w.notes.error.isVisible()
        assert w.sidebar.list.count() == 2 and [x.role for x in w.chat.widgets] == ["user"] * 3
        assert w.controller.history.read_only
    finally:
        w.close()
    assert (folder / "history.sqlite3").read_bytes() == before


@pytest.mark.slow
def test_writes_to_a_read_only_history_are_one_banner_line_not_a_crash(qtbot, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    make_history(folder / "history.sqlite3", chats=2, messages=3)
    _newer_schema(folder / "history.sqlite3", None)
    settings = Settings(max_new_tokens=16)
    check_data_files(prepare_data_folder(folder), settings)
    w = make_window(qtbot, folder, settings)
    try:
        c = w.controller
        errors = []
        c.sig_error.connect(lambda message, lower: errors.append(message))
        cid = c.chats.current
        assert c.chats.send("What is 2 + 3?") is False and not c.replies.busy
        c.chats.rename(cid, "renamed")
        c.chats.delete(cid)
        c.chats.set_settings("be brief", {})
        assert len(errors) == 4 and all("read-only" in e and "\n" not in e for e in errors)
        assert w.notes.error.isVisible() and "read-only" in w.notes.error.text()
    finally:
        w.close()


MAIN_SCRIPT = """
import sys; sys.path.insert(0, {root!r})
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from app.main import main
app = QApplication([])
def close_when_loaded():
    for w in app.topLevelWidgets():
        if type(w).__name__ == "MainWindow" and getattr(w, "loaded", None) is not None:
            print("BANNER:", w.notes.error.text() if w.notes.error.isVisible() else "")
            w.close()
            return
    QTimer.singleShot(100, close_when_loaded)
QTimer.singleShot(100, close_when_loaded)
sys.exit(main(["--data-dir", {data!r}]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["a damaged history with a chat of bad JSON", "a data folder that is a file"])
def test_main_opens_says_what_is_wrong_and_exits_cleanly(tmp_path, case):
    data = tmp_path / "data"
    if case.startswith("a damaged"):
        data.mkdir()
        make_history(data / "history.sqlite3", chats=2, messages=2)
        db = sqlite3.connect(str(data / "history.sqlite3"))
        db.execute("UPDATE conversations SET settings='{not json' WHERE id=1")  # once kept the window from opening
        db.commit()
        db.close()
        (data / "settings.json").write_text(json.dumps({"depth": 7, "font_size": "x", "theme": "dark"}))
    else:
        data.write_text("not a folder")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1", "ELASTIC_CHAT_HOME": str(tmp_path),
           "TMPDIR": str(tmp_path)}  # the fallback's temporary folder goes there too
    proc = subprocess.run([sys.executable, "-c", MAIN_SCRIPT.format(root=str(ROOT), data=str(data))], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    banner = proc.stdout.split("BANNER:", 1)[1]
    if case.startswith("a damaged"):
        assert "depth is 7" in banner and "default settings" in banner
        assert json.loads((data / "settings.json").read_text())["theme"] == "dark"  # saved at exit, kept
    else:
        assert "cannot be used (it is a file, not a folder)" in banner and data.read_text() == "not a folder"
