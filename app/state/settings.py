"""App settings (no Qt): a JSON file in the user data folder, private to the user (it holds the
server's API key) and written atomically (runtime/private_files.py) each time a setting changes,
so a kill or a crash loses nothing: the window saves them when the Settings dialog is accepted, a
model is chosen or the depth moves, not only at a clean quit.

The file is input from outside (a hand edit, another version, a damaged disk), so every field is
checked by type and range (`FIELDS`, `SAMPLING_FIELDS`: numbers by their option in runtime/options.py,
whose ranges the Settings dialog, the CLI and the server use too) and a bad value falls back to its
default alone; the others are kept. `problem` then says which fields and
why, and the file as it was is copied to `settings.broken` before the next save rewrites it. A file
that is not a JSON object at all is moved aside to `settings.broken` and the defaults are used.
The local server's address and API key are also checked together (an address other computers can
reach needs a key, as `serve` requires): when they do not go together the server stays off and
`problem` says why. Unknown keys (a newer version's) are kept and written back. Saving never
raises: a folder that cannot be written gives a one-line reason instead, and a file that could not
be set aside is never overwritten.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runtime.api import (
    ALLOW_HOSTS,
    ALLOW_ORIGINS,
    CONTEXT,
    MAX_NEW_TOKENS,
    MIN_P,
    PORT,
    SAMPLING,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    Option,
    level_names,
    make_private_folder,
    read_bounded,
    read_json_file,
    refusal,
    show,
    table_default_level,
    write_private,
)
from runtime.api import options as registry

from .reasons import why

log = logging.getLogger(__name__)
THEMES = ("system", "light", "dark")
MAX_FILE_BYTES = 10 * 2**20  # a settings file is a few hundred bytes; a bigger one is not ours


# The app's own numbers, declared as the runtime's are (the dialog's fields derive from them too).
FONT_SIZE = Option("font_size", int, 11, 7, 28, "the chat's text size in points")
# A saved port must be one clients find again: 0 (any free port, for `serve`) would change at each start.
SERVER_PORT = PORT.within(name="server_port", low=1)


@dataclass
class Sampling:
    temperature: float = TEMPERATURE.default
    top_p: float = TOP_P.default
    top_k: int = TOP_K.default
    min_p: float = MIN_P.default


@dataclass
class Settings:
    theme: str = "system"  # system, light or dark
    font_size: int = FONT_SIZE.default
    system_prompt: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    depth: str = field(default_factory=lambda: _table_default())  # the depth table's default level
    max_new_tokens: int = MAX_NEW_TOKENS.default
    context: int = CONTEXT.default
    context_overflow: str = registry.CONTEXT_OVERFLOW.default  # what a chat longer than the context does
    active_model: str = ""  # a checkpoint folder; empty: the bundled demo
    models_dir: str = ""  # empty: the platform's standard folder
    server_enabled: bool = False  # serve the loaded model to other programs (app/server_control.py)
    server_host: str = "127.0.0.1"  # any address that is not loopback needs server_api_key
    server_port: int = SERVER_PORT.default
    server_api_key: str = ""  # clients send it as a Bearer token; empty: none asked for
    server_allow_hosts: list[str] = field(default_factory=list)  # more names it answers to (ALLOW_HOSTS)
    server_allow_origins: list[str] = field(default_factory=list)  # web pages that may call it (ALLOW_ORIGINS)
    demo_banner_closed: str = ""  # the key of the demo banner the user closed (app/demo_banner.py: banner_key)
    problem: str = ""  # what was wrong with the data files, for the window's banner (shown once, not saved)

    def __post_init__(self):
        self.unknown: dict = {}  # keys this version does not know, written back unchanged
        self.save_blocked = ""  # why save() must not write (a damaged file that could not be set aside)

    @classmethod
    def load(cls, path: Path) -> "Settings":
        """Never raises: whatever the file holds, the app gets usable settings and `problem` says what
        was wrong and what was done about it."""
        path = Path(path)
        try:
            if not path.exists() and not path.is_symlink():
                return cls()
            data = _read_object(path)
        except (OSError, ValueError, RecursionError) as e:
            return cls._set_aside(path, why(e))
        s = cls()
        bad: list[str] = []
        for name, check in FIELDS.items():
            if name in data:
                _take(s, name, data[name], check, name, bad)
        if "sampling" in data:
            sampling = data["sampling"]
            if isinstance(sampling, dict):
                clean, problems = check_sampling(sampling)
                for k, v in clean.items():
                    setattr(s.sampling, k, v)
                bad += [f"sampling.{p}" for p in problems]
                s.unknown["sampling"] = {k: v for k, v in sampling.items() if k not in SAMPLING_FIELDS}
            else:
                bad.append(refusal("sampling", sampling, "an object"))
        s.unknown.update({k: v for k, v in data.items() if k not in FIELDS and k not in ("sampling", "problem")})
        unsafe = server_problem(s.server_host, s.server_port, s.server_api_key) if s.server_enabled else ""
        if unsafe:  # each value passed alone, not together: the server stays off until the user fixes it
            s.server_enabled = False
            bad.append(f"server_enabled is true, but {unsafe[0].lower()}{unsafe[1:].rstrip('.')} "
                       "(the server stays off)")
        if bad:
            kept = _keep_copy(path)
            s.problem = (f"{path.name}: {len(bad)} value{'s' if len(bad) > 1 else ''} could not be used, so "
                         f"{'their defaults are' if len(bad) > 1 else 'its default is'} used instead: "
                         + "; ".join(bad) + f". {kept}")
            log.warning(s.problem)
        return s

    @classmethod
    def _set_aside(cls, path: Path, reason: str) -> "Settings":
        """The whole file is unusable: move it aside (never delete it) and use the defaults."""
        broken = _free_name(path, ".broken")
        try:
            os.replace(path, broken)
        except OSError as e:
            s = cls(problem=f"{path.name} could not be read ({reason}) and could not be set aside ({why(e)}); "
                            "defaults are used and the file is left as it is (it will not be overwritten)")
            s.save_blocked = f"{path.name} was not saved: the unreadable file there is kept as it is"
            log.warning(s.problem)
            return s
        s = cls(problem=f"{path.name} could not be read ({reason}); defaults are used and the old file "
                        f"was kept as {broken.name}")
        log.warning(s.problem)
        return s

    def save(self, path: Path) -> str:
        """Writes the settings atomically. Returns "" or, when they could not be written, one line
        saying why (never raises: it runs when the app closes)."""
        path = Path(path)
        if self.save_blocked:
            return self.save_blocked
        data = {**{k: v for k, v in self.unknown.items() if k != "sampling"}, **asdict(self)}
        data.pop("problem")
        data["sampling"] = {**self.unknown.get("sampling", {}), **data["sampling"]}
        try:
            make_private_folder(path.parent)
            write_private(path, (json.dumps(data, indent=2) + "\n").encode())
        except (OSError, TypeError, ValueError) as e:
            message = f"Settings could not be saved to {path} ({why(e)})"
            log.warning(message)
            return message
        return ""


# ---------------------------------------------------------------------- checks per field
# Each check returns the value to use or raises ValueError saying what a valid value is ("one of ...").

def _choice(options: tuple[str, ...]):
    def check(v):
        if isinstance(v, str) and v.strip().lower() in [o.lower() for o in options]:
            return next(o for o in options if o.lower() == v.strip().lower())
        raise ValueError(f"one of {', '.join(options)}")
    return check


def _text(max_chars: int, path: bool = False):
    def check(v):
        if not isinstance(v, str):
            raise ValueError("text")
        if len(v) > max_chars:
            raise ValueError(f"text of at most {max_chars} characters")
        if path and ("\0" in v or any(ord(c) < 32 for c in v)):
            raise ValueError("a folder path (without control characters)")
        return v
    return check


def _depth(v):
    try:  # the depth table's level names are the valid depths
        names = level_names()
    except Exception:  # a broken install's table: the slider says so; here, any short name passes
        return _text(40)(v)
    return _choice(names)(v)


def _table_default() -> str:
    try:
        return table_default_level()
    except Exception:  # a broken install's table: "" lets the loaded engine's default apply
        return ""


def _flag(v):
    if not isinstance(v, bool):
        raise ValueError("true or false")
    return v


def _host(v):
    """An IP address or a host name (whether it is one of this computer's is found when the server binds)."""
    if not isinstance(v, str) or host_problem(v):
        raise ValueError("an IP address or a host name of at most 253 characters")
    return v


def _api_key(v):
    from runtime.api import valid_api_key  # the server's own rule

    if not isinstance(v, str) or (v and not valid_api_key(v)):
        raise ValueError("an API key of at least 8 printable characters with no spaces, or empty")
    return v


def host_problem(host: str) -> str:
    """Why `host` cannot be the server's address ("" when it can): it must be an IP address or a host name."""
    import ipaddress

    if not host or len(host) > 253:
        return "empty or longer than 253 characters"
    try:
        ipaddress.ip_address(host)
        return ""
    except ValueError:
        pass
    if all(label and len(label) <= 63 and not label.startswith("-") and not label.endswith("-")
           and all(c.isascii() and (c.isalnum() or c == "-") for c in label) for label in host.split(".")):
        return ""
    return "not an IP address or host name"


def server_problem(host: str, port: int, api_key: str, serving: bool = True) -> str:
    """Why the local server cannot listen with these values ("" when it can), in the settings' words;
    with `serving` False, only whether they can be saved (an open address without a key may wait).
    The rules are the server's own (runtime/server/access_rules.py: `is_loopback`, `valid_api_key`, which
    `check_listen` applies to `serve`'s options), so the app and `serve` accept the same addresses."""
    from runtime.api import is_loopback, valid_api_key

    if host_problem(host):
        return (f"The address {show(host, 40)} is {host_problem(host)}: use 127.0.0.1 (only this computer) "
                "or an address of this computer.")
    try:
        SERVER_PORT.check(port)
    except ValueError as e:
        return f"The port {show(port, 40)} is not {e}."
    if api_key and not valid_api_key(api_key):
        return "The API key must be at least 8 printable characters with no spaces."
    if serving and not is_loopback(host) and not api_key:
        return (f"The address {host} lets other computers reach the model: set an API key of at least "
                "8 characters (clients send it as a Bearer token), or use 127.0.0.1.")
    return ""


FIELDS = {
    "theme": _choice(THEMES),
    "font_size": FONT_SIZE.check,
    "system_prompt": _text(200_000),
    "depth": _depth,
    "max_new_tokens": MAX_NEW_TOKENS.check,
    "context": CONTEXT.check,
    "context_overflow": registry.CONTEXT_OVERFLOW.check,
    "active_model": _text(4096, path=True),
    "models_dir": _text(4096, path=True),
    "server_enabled": _flag,
    "server_host": _host,
    "server_port": SERVER_PORT.check,
    "server_api_key": _api_key,
    "server_allow_hosts": lambda v: list(ALLOW_HOSTS.check(v)),
    "server_allow_origins": lambda v: list(ALLOW_ORIGINS.check(v)),
    "demo_banner_closed": _text(64),
}
SAMPLING_FIELDS = {option.name: option.check for option in SAMPLING}


def check_sampling(values: dict) -> tuple[dict, list[str]]:
    """The valid sampling values among `values` (unknown keys dropped) and one phrase per bad one;
    also used for a chat's own sampling stored in the history."""
    clean, problems = {}, []
    for name, check in SAMPLING_FIELDS.items():
        if name in values:
            try:
                clean[name] = check(values[name])
            except ValueError as e:
                problems.append(refusal(name, values[name], str(e)))
    return clean, problems


def _take(target, name: str, value, check, label: str, bad: list[str]) -> None:
    try:
        setattr(target, name, check(value))
    except ValueError as e:
        bad.append(refusal(label, value, str(e)))


def _read_object(path: Path) -> dict:
    # ValueError (JsonFileError) says why in a few words; a planted link is refused, not read through
    return read_json_file(path, MAX_FILE_BYTES, follow_links=False)


def _free_name(path: Path, suffix: str) -> Path:
    """settings.broken, or settings-YYYYmmdd-HHMMSS.broken when that name holds an earlier one."""
    first = path.with_suffix(suffix)
    if not first.exists() and not first.is_symlink():
        return first
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        candidate = path.with_name(f"{path.stem}-{stamp}{'' if n == 1 else f'-{n}'}{suffix}")
        if not candidate.exists() and not candidate.is_symlink():
            return candidate
    return path.with_name(f"{path.stem}-{stamp}-{os.getpid()}{suffix}")


def _keep_copy(path: Path) -> str:
    """Copies the file as it was before the next save rewrites the bad values with defaults."""
    kept = _free_name(path, ".broken")
    try:
        write_private(kept, read_bounded(path, MAX_FILE_BYTES)[:MAX_FILE_BYTES])
    except OSError as e:
        return f"(The file as it was could not be copied: {why(e)}.)"
    return f"The file as it was is kept as {kept.name}."

