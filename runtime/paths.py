"""Where Elastic Chat keeps its files on this computer: the one owner, asked by the app, the model
store and the installers alike.

    data_dir()        chats (history.sqlite3), settings.json, window.json and the log: ELASTIC_CHAT_HOME,
                      else Linux $XDG_DATA_HOME/elastic-chat (~/.local/share), macOS ~/Library/Application
                      Support/Elastic Chat, Windows %LOCALAPPDATA%\\ElasticChat
    models_dir()      downloaded checkpoints and imported.json: the folder the app chose (its settings',
                      `use_models_dir`), else ELASTIC_CHAT_MODELS, else data_dir()/models
    log_file(data)    data/elastic-chat.log
    instance_name(data), socket_folders(data), socket_path(data)
                      the single-instance lock file and socket, one per user and data folder, in a folder
                      only the user can enter: $XDG_RUNTIME_DIR/elastic-chat, else data/run, else (a
                      path too long for a socket) the temporary folder's elastic-chat-<uid>; the app
                      (app/single_instance.py) uses the first it can make 0700 and owns. On Windows the
                      socket is a named pipe and the lock file lives in data/run.

The installers ask this file, not a copy of its rules: `python -I runtime/paths.py` prints the folders,
`--purgeable` the folders `--uninstall --purge` may delete. It runs on any Python 3.8 or newer, without
the app's environment (the uninstaller may have removed it), so it imports nothing but the standard
library.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import sys
import tempfile
from pathlib import Path

HOME_ENV, MODELS_ENV = "ELASTIC_CHAT_HOME", "ELASTIC_CHAT_MODELS"
LOG_FILE = "elastic-chat.log"
APP_ROOT = Path(__file__).resolve().parents[1]  # the app's own folder (the repository)


def data_dir() -> Path:
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV])
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "ElasticChat"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "Elastic Chat"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "elastic-chat"


_chosen_models_dir: Path | None = None  # this process's: the app's setting (never put in the environment,
# which every program the app starts would inherit)


def use_models_dir(folder: str | Path | None) -> None:
    """The models folder this process uses from now on (the app's settings); empty or None: the default."""
    global _chosen_models_dir
    _chosen_models_dir = Path(folder) if folder else None


def models_dir() -> Path:
    if _chosen_models_dir is not None:
        return _chosen_models_dir
    return Path(os.environ[MODELS_ENV]) if os.environ.get(MODELS_ENV) else default_models_dir()


def default_models_dir() -> Path:
    """The models folder when none was chosen."""
    return data_dir() / "models"


def log_file(data: Path) -> Path:
    return Path(data) / LOG_FILE


def instance_name(data: Path) -> str:
    """The single-instance socket's name: one per user and data folder."""
    key = hashlib.sha1(str(Path(data).resolve()).encode()).hexdigest()[:12]
    return f"elastic-chat-{getpass.getuser()}-{key}"


SOCKET_FOLDER = "run"  # inside the data folder
MAX_SOCKET_PATH = 100  # sockaddr_un holds 104 (macOS) or 108 (Linux) bytes with the final NUL


def socket_folders(data: Path) -> list[Path]:
    """The private folders that may hold the lock and the socket, best first (see the module's docstring)."""
    folders = []
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if sys.platform != "win32" and runtime_dir and Path(runtime_dir).is_absolute():
        folders.append(Path(runtime_dir) / "elastic-chat")
    folders.append(Path(data) / SOCKET_FOLDER)
    if sys.platform != "win32":
        folders.append(Path(tempfile.gettempdir()) / f"elastic-chat-{os.getuid()}")
    return folders


def socket_file_name(data: Path) -> str:
    """The socket's (and, with .lock, the lock file's) name in one of `socket_folders`."""
    return "i-" + instance_name(data).rsplit("-", 1)[1]


def socket_path(data: Path) -> str:
    """Where the socket is: in the first of `socket_folders` whose path is short enough for a socket
    (the app may use a later one when that folder is not the user's alone), or a named pipe on Windows."""
    name = instance_name(data)
    if sys.platform == "win32":
        return rf"\\.\pipe\{name}"
    return next((str(p) for f in socket_folders(data) if len(str(p := f / socket_file_name(data))) <= MAX_SOCKET_PATH),
                str(socket_folders(data)[-1] / socket_file_name(data)))


def purge_problem(folder: Path) -> str:
    """Why `--purge` must not delete `folder` ("" when it may): it must be a folder the app uses for
    itself, never the home folder, a folder above it, a drive's root or the app's own folder."""
    folder = Path(folder)
    if not folder.is_absolute():
        return "it is not an absolute path"
    if any(c in str(folder) for c in "\n\r\0"):
        return "its name holds a line break"
    if folder.is_symlink():
        return "it is a link (only the link's target would be the app's)"
    real, home = folder.resolve(), Path.home().resolve()
    if real == Path(real.anchor) or real == home or real in home.parents:
        return "it is the home folder, a folder above it or a drive's root"
    if real == APP_ROOT or real in APP_ROOT.parents:
        return "it holds Elastic Chat itself"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    data = data_dir()
    if args == ["--purgeable"]:
        # One line per folder that --purge may delete, and the folders it keeps, each with why:
        # "remove<TAB>path" / "keep<TAB>path<TAB>why". Nothing listed is ever guessed.
        problem = purge_problem(data)
        if data.exists() or data.is_symlink():
            print(f"keep\t{data}\t{problem}" if problem else f"remove\t{data}")
        models = models_dir()
        inside = models.resolve() == default_models_dir().resolve()
        if not inside and models.exists():
            print(f"keep\t{models}\tdownloaded models in a folder you chose ({MODELS_ENV}); delete it yourself")
        return 0
    if args:
        print("usage: python -I runtime/paths.py [--purgeable]", file=sys.stderr)
        return 2
    print(f"data\t{data}\nmodels\t{models_dir()}\nlog\t{log_file(data)}\nsocket\t{socket_path(data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
