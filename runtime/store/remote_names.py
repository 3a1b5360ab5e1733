"""File names that come from outside (a hub's file list, a download record) and where they may land.

A hub is hostile until checked: every name it lists goes through `check_remote_name` before anything
touches the disk, and every path we write or read is built by `target_path`, which walks the
destination one component at a time and refuses a symbolic link (or Windows junction) planted there.
The rules are the same on every OS, so a repo that downloads on Linux also downloads on Windows:

- relative POSIX paths only: no empty name or component, no `.` or `..`, no leading `/`, no drive
  (`C:`), no backslash, none of `<>:"|?*` (Windows refuses them; `:` also opens NTFS streams);
- no NUL or other control or invisible format characters (they hide in terminals and logs);
- no Windows device names (`CON`, `nul.txt`, `COM1`...), no component ending in a dot or a space;
- at most 255 bytes per component, 1024 characters and 32 levels in all;
- not our own bookkeeping: the hidden `.elastic-chat/` folder (download record, lock, partial
  files), the record's old name, and `imported.json`;
- nothing another tool acts on when someone merely enters the folder or opens it (`TOOL_NAMES`,
  at any depth, compared case-folded): a version-control folder (a `.git/config` with
  `core.fsmonitor` runs its command at the next `git status` there, or in a git-aware prompt or
  editor; `.hg/hgrc` hooks and `_darcs/prefs` the same), a folder shaped like a bare git repository
  (`HEAD`, `objects/`, `refs/` side by side: git uses it, config and all, with no `.git` at all),
  a Windows short name (`GIT~1` is `.git`), shell environment files (direnv's `.envrc`, autoenv's
  `.env`, mise's config), editor and IDE workspace folders that run tasks or language servers
  (`.vscode/`, `.idea/`, `.helix/`, `.dir-locals.el`, `.exrc`), hook folders, and Explorer's
  `desktop.ini`, `autorun.inf` and the shortcut kinds whose icon it fetches (`.scf`, `.url`, `.lnk`,
  `.library-ms`, `.searchConnector-ms`: a remote icon leaks the user's Windows credentials). A
  model repo holds none of these; `.gitattributes` and `.gitignore` (in every hub repo) are only
  read by git, never run, and stay allowed, as does `.DS_Store` (Finder's view settings: data
  Finder parses, never runs);
- no two names that are the same file on a case-insensitive or normalising file system, and no
  name that is both a file and a folder.
"""

from __future__ import annotations

import os
import re
import stat
import unicodedata
from pathlib import Path

from ..errors import ElasticError, show

BOOKKEEPING = ".elastic-chat"  # our hidden folder inside a download folder
RESERVED_TOP = {BOOKKEEPING, ".elastic-chat-download.json", "imported.json"}  # compared case-folded
MAX_COMPONENT_BYTES = 255
MAX_NAME_CHARS = 1024
MAX_DEPTH = 32
MAX_FILES = 100_000
_WINDOWS_FORBIDDEN = set('<>:"|?*\\')
_DEVICES = {"con", "prn", "aux", "nul", "conin$", "conout$",
            *(f"com{i}" for i in "123456789¹²³"), *(f"lpt{i}" for i in "123456789¹²³")}
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}
# Names a tool acts on when someone enters or opens the folder holding them (compared case-folded).
TOOL_NAMES = {
    # version control: each reads its folder's config (hooks, fsmonitor, pagers) on any command there
    ".git", ".hg", ".svn", ".bzr", "cvs", "_darcs", ".jj", ".pijul", ".sl", ".fslckout", "_fossil_",
    ".fossil-settings",
    # the shell's environment on entering a folder (direnv, autoenv, zsh-autoenv, mise)
    ".envrc", ".direnv", ".env", ".env.leave", ".autoenv.zsh", ".autoenv_leave.zsh",
    "mise.toml", ".mise.toml", "mise.local.toml", ".mise.local.toml", ".mise", ".rtx.toml",
    # editors and IDEs: workspace tasks, run configurations, language servers, local vim/emacs code
    ".vscode", ".idea", ".fleet", ".zed", ".helix", ".theia", ".devcontainer", ".dir-locals.el",
    ".dir-locals-2.el", ".exrc", ".nvimrc", ".nvim.lua", ".lvimrc",
    # hook folders that hook managers install from
    ".hooks", ".githooks", ".husky",
    # Windows Explorer: folder customisation and autorun
    "desktop.ini", "autorun.inf", "folder.htt",
}
# File kinds whose icon Explorer fetches from wherever the file says, when it shows the folder.
TOOL_SUFFIXES = (".scf", ".url", ".lnk", ".library-ms", ".searchconnector-ms")
_SHORT_NAME = re.compile(r"[^.~]{1,6}~[0-9]+(\.[^.]{0,3})?")  # an 8.3 alias such as GIT~1 or PROGRA~2.TXT


class UnsafeName(ElasticError):
    """A remote file name that must not be written (the message says which and why)."""


def _problem(name) -> str | None:
    if not isinstance(name, str):
        return f"is not text ({type(name).__name__})"
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"is longer than {MAX_NAME_CHARS} characters"
    if any(unicodedata.category(c) in _HIDDEN_CATEGORIES for c in name):
        return "holds a control or invisible character"
    if "\\" in name:
        return "holds a backslash (a folder separator on Windows)"
    if name.startswith("/"):
        return "is an absolute path"
    if any(c in _WINDOWS_FORBIDDEN for c in name):
        return 'holds one of <>:"|?* (a drive or a character Windows refuses)'
    parts = name.split("/")
    if len(parts) > MAX_DEPTH:
        return f"is nested deeper than {MAX_DEPTH} folders"
    for part in parts:
        if part in ("", ".", ".."):
            return f"has a {part!r} component" if part else "has an empty component (a doubled or trailing /)"
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"has a component longer than {MAX_COMPONENT_BYTES} bytes"
        if part[-1] in ". ":
            return "has a component ending in a dot or a space (Windows drops it)"
        if part.split(".")[0].rstrip(" ").casefold() in _DEVICES:
            return "uses a Windows device name (CON, NUL, COM1...)"
        tool = _tool_problem(part)
        if tool:
            return tool
    if _fold(parts[0]) in RESERVED_TOP:
        return "is reserved for Elastic Chat's own records"
    return None


def _tool_problem(part: str) -> str | None:
    folded = _fold(part)
    if folded in TOOL_NAMES:
        return (f"holds {show(part)}, which a tool runs commands from when someone enters or opens the folder "
                "(version control, shell environment, editor, Explorer)")
    if folded.endswith(TOOL_SUFFIXES):
        return (f"holds {show(part)}, a shortcut whose icon Windows Explorer fetches from anywhere when it shows "
                "the folder")
    if _SHORT_NAME.fullmatch(part):
        return f"holds {show(part)}, a Windows short (8.3) name, which can stand for another name (GIT~1 is .git)"
    return None


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def check_remote_name(name) -> str:
    """`name` if it is a safe relative path for a download folder; else UnsafeName, one line."""
    problem = _problem(name)
    if problem:
        raise UnsafeName(f"unsafe file name {show(name)} {problem}")
    return name


def check_remote_names(names) -> None:
    """Every name in a file list, and the list as a whole (no two names for one file)."""
    names = list(names)
    if len(names) > MAX_FILES:
        raise UnsafeName(f"the file list holds {len(names)} files, more than {MAX_FILES}")
    seen: dict[str, str] = {}
    folders: dict[str, str] = {}
    for name in names:
        check_remote_name(name)
        key = _fold(name)
        if key in seen:
            raise UnsafeName(f"file names {show(seen[key])} and {show(name)} are the same file on Windows and "
                             "macOS (they differ only in case or Unicode form)")
        seen[key] = name
        parts = key.split("/")
        for i in range(1, len(parts)):
            folders.setdefault("/".join(parts[:i]), name)
    for key, name in seen.items():
        if key in folders:
            raise UnsafeName(f"{show(name)} is both a file and the folder of {show(folders[key])}")
    _check_no_bare_repository(seen, folders)


def _check_no_bare_repository(files: dict[str, str], folders: dict[str, str]) -> None:
    """Git takes any folder holding a `HEAD` file and `objects/` and `refs/` folders for a bare
    repository, and runs what its `config` says (core.fsmonitor) on a command there: refused, at
    any depth, the download folder itself included. `files` and `folders` are case-folded."""
    for key, name in files.items():
        parent, _, leaf = key.rpartition("/")
        prefix = parent + "/" if parent else ""
        if leaf == "head" and prefix + "objects" in folders and prefix + "refs" in folders:
            raise UnsafeName(f"{show(name)} with {show(prefix + 'objects/')} and {show(prefix + 'refs/')} "
                             "make a folder git takes for a repository (it would run commands from its config)")


def is_link(st: os.stat_result) -> bool:
    # A Windows junction is not a symlink to lstat but redirects just the same (a reparse point).
    return stat.S_ISLNK(st.st_mode) or bool(getattr(st, "st_file_attributes", 0) & 0x400)


def target_path(dest: Path, name: str, create_parents: bool = False) -> Path:
    """Where remote file `name` lives inside `dest`, strictly inside it, through no symbolic link.

    Each folder between `dest` and the file must be a real folder (created when `create_parents`);
    the file itself, if present, must not be a link. `dest` itself may be a link the user chose.
    Raises UnsafeName with one line naming the offending path.
    """
    check_remote_name(name)
    root = Path(os.path.abspath(dest))
    here = root
    parts = name.split("/")
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            if i < len(parts) - 1 and create_parents:
                os.mkdir(here)
                continue
            return _inside(root, root.joinpath(*parts))
        if is_link(st):
            raise UnsafeName(f"{here} is a symbolic link inside the download folder; refusing to follow it. "
                             "Remove it, then run the download again")
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
            raise UnsafeName(f"{here} is a file where the download needs a folder; move it away and run again")
    return _inside(root, here)


def _inside(root: Path, path: Path) -> Path:
    # Belt and braces: after the rules above this cannot fail; it is the invariant they protect.
    if os.path.commonpath([root, path]) != str(root) or path == root:
        raise UnsafeName(f"{path} is not inside {root}")
    return path


def open_no_follow(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open that refuses to go through a symbolic link at `path` (O_NOFOLLOW where the OS has it)."""
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    if not hasattr(os, "O_NOFOLLOW"):
        try:
            if is_link(os.lstat(path)):
                raise UnsafeName(f"{path} is a symbolic link; refusing to follow it")
        except FileNotFoundError:
            pass
    try:
        return os.open(path, flags, mode)
    except OSError as e:
        if getattr(os, "O_NOFOLLOW", 0) and e.errno == 40:  # ELOOP: the last component is a link
            raise UnsafeName(f"{path} is a symbolic link; refusing to follow it") from None
        raise
