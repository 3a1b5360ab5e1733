"""Where a download may write: only into a folder that is the user's to fill.

A download writes a stranger's file names, dotfiles included, into its folder, so the folder must
be one the user gave to it: a folder inside the models folder, a folder that does not exist yet
(it is created, so it is the user's), an empty folder the user owns, or a folder this program is
already downloading into (its `.elastic-chat/` record: a resume). Anything else (/etc, a project,
the desktop, another user's folder) is refused with one line before the hub is asked. The
`models download --dest` flag and the app's downloads both ask `check_destination`; the download
itself still refuses the home folder and never overwrites a file it did not write.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..remote_names import BOOKKEEPING, is_link
from .hub_files import DownloadError
from .record import LEGACY_MANIFEST


def check_destination(dest: Path, models: Path, uid: int | None = None) -> Path:
    """`dest` as an absolute path if a download may write there (see the module), else DownloadError.
    `uid` is the user's id (default: this process's effective one; ignored where there is none)."""
    dest = Path(os.path.abspath(os.path.expanduser(dest)))
    if uid is None:
        uid = os.geteuid() if hasattr(os, "geteuid") else None
    real = dest.resolve()  # a link the user made is judged by what it points to
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return dest  # a new folder: created by the download, so the user's
    if not stat.S_ISDIR(st.st_mode):
        raise DownloadError(f"{dest} is a file, not a folder: choose another destination")
    if uid is not None and st.st_uid != uid:
        raise DownloadError(f"{dest} belongs to another user: choose a folder of your own for the download")
    models_real = Path(models).resolve()
    if real != models_real and real.is_relative_to(models_real):
        return dest
    if _empty_or_ours(real, uid):
        return dest
    raise DownloadError(f"{dest} already holds files and is not a folder this program downloads into; choose a "
                        f"new or empty folder, or one inside the models folder ({models})")


def _empty_or_ours(folder: Path, uid: int | None) -> bool:
    """The folder holds nothing, or our own record of a download (so this is a resume)."""
    with os.scandir(folder) as entries:
        if next(entries, None) is None:
            return True
    for name in (BOOKKEEPING, LEGACY_MANIFEST):
        try:
            st = os.lstat(folder / name)
        except FileNotFoundError:
            continue
        kind_ok = stat.S_ISDIR(st.st_mode) if name == BOOKKEEPING else stat.S_ISREG(st.st_mode)
        if kind_ok and not is_link(st) and (uid is None or st.st_uid == uid):
            return True
    return False
