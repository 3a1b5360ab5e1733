"""The files the app reads at start and writes (app/state/*): each is opened non-blocking, regular
files only, without following links, bounded; each write is a fresh temporary file renamed into
place; the folder and files are private; the history refuses code (views, triggers), reads a big
message bounded and turns a full disk into one line."""

import json
import os
import sqlite3
import stat
import threading

import pytest

from app.state.data_files import check_data_files, prepare_data_folder
from app.state.history import MAX_SHOWN_CHARS, History, HistoryFull, HistoryReadOnly
from app.state.settings import Settings
from app.state.window_state import WindowState
from runtime.private_files import NotARegularFile, open_append, read_bounded, write_private


def finishes(fn, seconds: float = 20.0):
    """fn() in a thread; fails (rather than hanging the suite) when it has not returned in time."""
    out: list = []

    def run():
        try:
            out.append((fn(), None))
        except BaseException as e:  # re-raised in the test's thread
            out.append((None, e))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "it hung"
    value, error = out[0]
    if error is not None:
        raise error
    return value


def plant(path, kind: str, victim=None) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "link":
        path.symlink_to(victim)
    elif kind == "folder":
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link", "folder"])
def test_window_json_that_is_not_a_plain_file_gives_the_default_window(tmp_path, kind):
    """A FIFO kept the window from opening; a link to /dev/zero raised MemoryError."""
    victim = tmp_path / "elsewhere.json"
    victim.write_text('{"x": 5, "y": 5, "width": 999, "height": 555}')
    plant(tmp_path / "window.json", kind, victim)
    s = finishes(lambda: WindowState.load(tmp_path))
    assert s == WindowState()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link", "folder"])
def test_settings_json_that_is_not_a_plain_file_is_set_aside(tmp_path, kind):
    victim = tmp_path / "elsewhere.json"
    victim.write_text('{"server_api_key": "from-elsewhere-123"}')
    plant(tmp_path / "settings.json", kind, victim)
    s = finishes(lambda: Settings.load(tmp_path / "settings.json"))
    assert s.server_api_key == "" and s.problem
    assert victim.read_text() == '{"server_api_key": "from-elsewhere-123"}'


@pytest.mark.parametrize("name", ["settings.tmp", "window.tmp", ".settings.json.tmp", "settings.json", "window.json"])
def test_links_planted_in_the_data_folder_are_never_written_through(tmp_path, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    data = tmp_path / "data"
    data.mkdir()
    (data / name).symlink_to(victim)
    assert Settings(server_api_key="a-secret-key").save(data / "settings.json") == ""
    WindowState(10, 20).save(data)
    assert victim.read_text() == "untouched"
    for real in ("settings.json", "window.json"):
        assert not (data / real).is_symlink() and stat.S_IMODE((data / real).stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
def test_the_log_is_never_written_through_a_planted_link(tmp_path, kind):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    data = tmp_path / "data"
    data.mkdir()
    plant(data / "elastic-chat.log", kind, victim)
    folder = finishes(lambda: prepare_data_folder(data))
    assert folder.path == data and "moved aside" in folder.notice
    with open_append(data / "elastic-chat.log") as log:
        log.write("a line\n")
    assert victim.read_text() == "untouched" and stat.S_IMODE((data / "elastic-chat.log").stat().st_mode) == 0o600


def test_the_private_readers_refuse_what_is_not_a_plain_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    for name in ("fifo", "zero"):
        with pytest.raises(NotARegularFile):
            finishes(lambda n=name: read_bounded(tmp_path / n, 100), 10)
    write_private(tmp_path / "f", b"x" * 1000)
    assert len(read_bounded(tmp_path / "f", 10)) == 11  # bounded: the caller sees there is more


def test_the_data_folder_and_its_files_are_private(tmp_path):
    """Files were created 0644 (settings.json with the API key in it)."""
    data = tmp_path / "data"
    folder = prepare_data_folder(data)
    settings = Settings(server_api_key="a-secret-key")
    assert settings.save(data / "settings.json") == ""
    check_data_files(folder, settings)
    WindowState().save(data)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("settings.json", "window.json", "history.sqlite3"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    os.chmod(data, 0o755)  # an older version's folder is made private at the next start
    prepare_data_folder(data)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def _history_with(path, *statements):
    h = History(path)
    cid = h.new_conversation("a chat").id
    h.add_message(cid, "user", "hello")
    h.close()
    db = sqlite3.connect(path)
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()
    return cid


ENDLESS = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
           "SELECT i AS id, 1 AS conversation_id, 'user' AS role, 'x' AS content, '' AS thinking, '{}' AS meta, "
           "0 AS created, 1 AS complete FROM n")


@pytest.mark.parametrize("code", [
    ["ALTER TABLE messages RENAME TO old_messages", f"CREATE VIEW messages AS {ENDLESS}"],
    [f"CREATE VIEW spare AS {ENDLESS}"],
    ["CREATE TRIGGER t AFTER INSERT ON messages BEGIN DELETE FROM conversations; END"],
    ["CREATE TRIGGER t2 BEFORE UPDATE ON messages BEGIN SELECT count(*) FROM "
     "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n); END"],
], ids=["endless-view-as-table", "endless-view", "trigger-deleting-chats", "endless-trigger"])
def test_a_history_that_holds_code_is_set_aside_and_its_chats_recovered(tmp_path, code):
    """An endless recursive view in place of a table kept the window from opening."""
    path = tmp_path / "history.sqlite3"
    _history_with(path, *code)

    def opened():  # in one thread: a SQLite connection stays in the thread that made it
        h = History(path)
        try:
            assert any("never writes" in n for n in h.notices), h.notices
            assert h.moved_aside is not None and h.moved_aside.exists()
            assert [c.title for c in h.conversations()] == ["a chat"]  # recovered from the set-aside file
            cid = h.add_message(h.new_conversation("new").id, "user", "still works").conversation_id
            assert [m.content for m in h.messages(cid)] == ["still works"]
        finally:
            h.close()
    finishes(opened, 60)


@pytest.mark.parametrize("size", [MAX_SHOWN_CHARS + 1, 1_000_000, 7_400_000])
def test_a_big_message_is_read_bounded_and_exported_whole(tmp_path, size):
    """A 7.4 MB message in the last chat kept the window from opening (1 MB took 12 s)."""
    h = History(tmp_path / "history.sqlite3")
    try:
        cid = h.new_conversation("big").id
        h.add_message(cid, "user", "y" * size, thinking="t" * size)
        (m,) = h.messages(cid)
        assert len(m.content) < MAX_SHOWN_CHARS + 300 and m.content.startswith("y" * 1000)
        assert f"{size - MAX_SHOWN_CHARS:,} more characters are not shown" in m.content
        assert "more characters" in m.thinking
        assert h.messages(cid, full=True)[0].content == "y" * size
        assert "y" * size in h.export_text(cid)
    finally:
        h.close()


def test_a_full_disk_is_one_line_and_nothing_half_written(tmp_path):
    """The next send raised a raw sqlite3.OperationalError into the crash dialog."""
    h = History(tmp_path / "history.sqlite3")
    try:
        cid = h.new_conversation("chat").id
        h.add_message(cid, "user", "fits")
        pages = h.db.execute("PRAGMA page_count").fetchone()[0]
        h.db.execute(f"PRAGMA max_page_count={pages + 1}")  # what a full disk looks like to SQLite
        for write in (lambda: h.add_message(cid, "user", "z" * 200_000),
                      lambda: h.update_message(1, "z" * 200_000, "", {}, complete=True),
                      lambda: h.finish_message(1, {"finish_reason": "z" * 200_000})):
            with pytest.raises(HistoryFull) as e:
                write()
            assert isinstance(e.value, HistoryReadOnly)  # the controller's guard shows it as one line
            assert "disk is full" in str(e.value) and "kept in the box" in str(e.value)
            assert not h.db.in_transaction
        assert [m.content for m in h.messages(cid)] == ["fits"]
    finally:
        h.close()


def test_a_kill_during_a_settings_save_leaves_the_old_file_or_the_new(tmp_path, monkeypatch):
    """The write goes to a fresh temporary name first; a failure mid-write leaves the old file and no temporary."""
    path = tmp_path / "settings.json"
    assert Settings(font_size=12).save(path) == ""
    real_write = os.write

    def dies(fd, data):
        real_write(fd, data[:10])
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "write", dies)
    assert "no space left" in Settings(font_size=20).save(path).lower()
    monkeypatch.setattr(os, "write", real_write)
    assert json.loads(path.read_text())["font_size"] == 12
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]
