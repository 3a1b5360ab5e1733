"""Desktop launchers (Linux): a .desktop entry in the user's applications folder, and on the
desktop when there is one. Windows shortcuts are made by installer/setup.ps1.

    python -m app.launcher install   |   python -m app.launcher uninstall
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESKTOP_FILE = "elastic-chat.desktop"


def applications_dir() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "applications"


def desktop_dir() -> Path | None:
    """The user's desktop folder, if there is one (XDG user dirs, else ~/Desktop)."""
    config = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "user-dirs.dirs"
    if config.exists():
        for line in config.read_text().splitlines():
            if line.startswith("XDG_DESKTOP_DIR="):
                path = Path(os.path.expandvars(line.split("=", 1)[1].strip().strip('"')))
                return path if path.is_dir() else None
    path = Path.home() / "Desktop"
    return path if path.is_dir() else None


def _quote(arg: str) -> str:
    """Quoting for the Exec key (Desktop Entry spec): reserved characters inside double quotes."""
    if not any(c in arg for c in ' \t\n"\'\\><~|&;$*?#()`'):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return f'"{escaped}"'


def desktop_entry(executable: Path, icon: Path) -> str:
    return "\n".join([
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.4",
        "Name=Elastic Chat",
        "GenericName=AI chat",
        "Comment=Chat with NVIDIA's elastic reasoning models on your PC",
        f"Exec={_quote(str(executable))}",
        f"Icon={icon}",
        "Terminal=false",
        "Categories=Network;Chat;",
        "Keywords=AI;LLM;chat;Nemotron;reasoning;",
        "StartupNotify=true",
        "StartupWMClass=elastic-chat",
        "",
    ])


def install(executable: Path | None = None, apps: Path | None = None, desktop: Path | None = None) -> list[Path]:
    executable = executable or Path(sys.executable).with_name("elastic-chat")
    entry = desktop_entry(executable, ROOT / "assets" / "icon.png")
    written = []
    for folder in (apps or applications_dir(), desktop if desktop is not None else desktop_dir()):
        if folder is None:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / DESKTOP_FILE
        path.write_text(entry)
        path.chmod(0o755)  # desktops only launch executable entries
        written.append(path)
    return written


def uninstall(apps: Path | None = None, desktop: Path | None = None) -> list[Path]:
    removed = []
    for folder in (apps or applications_dir(), desktop if desktop is not None else desktop_dir()):
        if folder is not None and (folder / DESKTOP_FILE).exists():
            (folder / DESKTOP_FILE).unlink()
            removed.append(folder / DESKTOP_FILE)
    return removed


if __name__ == "__main__":
    action = sys.argv[1] if len(sys.argv) > 1 else "install"
    paths = install() if action == "install" else uninstall()
    for p in paths:
        print(f"{'wrote' if action == 'install' else 'removed'} {p}")
