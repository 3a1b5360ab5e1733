"""The user data folder at startup (no Qt): a folder the app can write, and one list of what was
wrong with it and its files, for the window's banner.

`prepare_data_folder` runs first (before the log file is opened in it) and never raises. A folder
that cannot be created or written (a path that is a file, no permission, a read-only disk) is not
used: the app runs on a new temporary folder holding a *copy* of the chats and settings it could
read there, so the user sees their chats and can keep chatting, and the banner says where this
session's changes go (they are not written back). The original folder is never changed.

`check_data_files` runs after the single-instance check (so a second launch never touches the
files of a running app): it opens the history once, which repairs what can be repaired (see
`app.state.history`), and puts every notice into `settings.problem`, which the window shows.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.api import LOG_FILE, make_private_folder, open_append

from .history import History
from .reasons import why
from .settings import Settings

log = logging.getLogger(__name__)
HISTORY, SETTINGS, LOG = "history.sqlite3", "settings.json", LOG_FILE


@dataclass(frozen=True)
class DataFolder:
    path: Path  # the folder the app uses
    requested: Path  # the folder it was asked to use
    notice: str = ""  # "" when `requested` is used as it is

    @property
    def temporary(self) -> bool:
        return self.path != self.requested


def prepare_data_folder(folder: Path | str) -> DataFolder:
    """The folder to keep chats, settings and the log in: `folder` when it can be created and
    written, else a temporary copy (see the module's docstring). Never raises."""
    folder = Path(folder).expanduser()
    problem = _unusable(folder)
    if not problem:
        return DataFolder(folder, folder, _free_log(folder))
    try:
        temp = Path(tempfile.mkdtemp(prefix="elastic-chat-"))
    except OSError as e:  # not even a temporary folder: nothing can be saved anywhere
        return DataFolder(folder, folder, f"The data folder {folder} cannot be used ({problem}) and no temporary "
                                          f"folder could be made ({why(e)}); nothing will be saved.")
    copied = _copy_readable(folder, temp)
    notice = (f"The data folder {folder} cannot be used ({problem}). This session uses the temporary folder "
              f"{temp}{' with a copy of your ' + ' and '.join(copied) if copied else ''}; what you change now is "
              "kept only there. Fix the folder, or start Elastic Chat with --data-dir and a folder you can write.")
    log.warning(notice)
    return DataFolder(temp, folder, notice)


def check_data_files(data: DataFolder | Path, settings: Settings) -> list[str]:
    """Opens the history in the data folder once (repairing what can be repaired) and returns every
    notice about the data files; they are also put into `settings.problem` for the window's banner."""
    if not isinstance(data, DataFolder):
        data = DataFolder(Path(data), Path(data))
    history = History(data.path / HISTORY)
    try:
        notices = [n for n in (data.notice, settings.problem, *history.notices) if n]
    finally:
        history.close()
    settings.problem = "\n".join(notices)
    return notices


def _unusable(folder: Path) -> str:
    """Why the app cannot keep its files in `folder` ("" when it can), found by trying."""
    try:
        make_private_folder(folder)
    except FileExistsError:
        return "it is a file, not a folder"
    except NotADirectoryError:
        return "a part of its path is a file, not a folder"
    except OSError as e:
        return f"it cannot be created: {why(e)}"
    probe = folder / f".write-test-{os.getpid()}"
    try:
        with open(probe, "xb") as f:
            f.write(b"ok")
        probe.unlink()
    except OSError as e:
        return f"it cannot be written: {why(e)}"
    return ""


def _free_log(folder: Path) -> str:
    """The log must open for appending, or logging.basicConfig raises before any window: a log file
    that cannot be written (or a link, a FIFO or a folder in its place) is renamed aside, never deleted."""
    path = folder / LOG
    if not path.exists() and not path.is_symlink():
        return ""
    try:
        open_append(path).close()  # a link, a FIFO or a folder there is refused, never written through
        return ""
    except OSError:
        pass
    aside = folder / f"elastic-chat.unwritable-{time.strftime('%Y%m%d-%H%M%S')}.log"
    try:
        os.replace(path, aside)
    except OSError as e:
        return f"The log {path} cannot be written nor moved aside ({why(e)}); errors are not recorded."
    return f"The log {path} could not be written; it was moved aside to {aside.name} and a new one started."


def _copy_readable(source: Path, temp: Path) -> list[str]:
    """Copies the history (with its WAL, which holds the newest commits after a crash) and the settings
    from `source` when they can be read; the names of what was copied, for the notice."""
    copied = []
    for names, label in (((HISTORY, HISTORY + "-wal"), "chats"), ((SETTINGS,), "settings")):
        try:
            if not _plain_file(source / names[0]):
                continue
            for name in names:
                if _plain_file(source / name):
                    shutil.copyfile(source / name, temp / name)
            copied.append(label)
        except OSError as e:
            log.warning("could not copy %s from %s: %s", label, source, e)
    return copied


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()  # a planted link is not copied through
