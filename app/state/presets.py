"""System-prompt presets (no Qt): a few built in, and the user's own in `prompt_presets.json` in the data
folder ({name: prompt}). The file is input from outside: read bounded, and a bad one is set aside by
the caller's notice (the built-ins stay); a bad entry alone is skipped."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from runtime.api import JsonFileError, read_json_file

log = logging.getLogger(__name__)
FILE = "prompt_presets.json"
MAX_FILE_BYTES = 2 * 2**20
MAX_NAME, MAX_PROMPT, MAX_PRESETS = 60, 20_000, 200
BUILT_IN = {
    "No system prompt": "",
    "Brief": "Answer briefly: a sentence or a short list, no preamble.",
    "Step by step": "Explain your reasoning step by step, then give the answer on its own line.",
    "Code reviewer": "You review code: point out bugs, unclear names and missing tests, most important first, "
                     "each with the line it concerns.",
}


def load_presets(folder: Path) -> tuple[dict[str, str], str]:
    """(the user's presets, a line saying what was wrong with the file or "")."""
    path = Path(folder) / FILE
    try:
        data = read_json_file(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return {}, ""
    except (OSError, JsonFileError) as e:
        return {}, f"{FILE} could not be read ({e}); your saved prompts are not offered until it is fixed or removed."
    good = {k: v for k, v in data.items() if _ok(k, v)}
    bad = len(data) - len(good)
    note = f"{bad} entries of {FILE} are not a name and a prompt; they are not offered." if bad else ""
    return dict(list(good.items())[:MAX_PRESETS]), note


def save_presets(folder: Path, presets: dict[str, str]) -> str:
    """Writes the user's presets atomically; "" or one line saying why they could not be saved."""
    path = Path(folder) / FILE
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(presets, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        return f"The prompt could not be saved to {path} ({(e.strerror or str(e)).lower()})."
    return ""


NO_PROMPT = ("This chat has no system prompt to save: write one first in Chat → Chat settings, then save it "
             "as a preset.")


def check_preset(name: str, prompt: str) -> str:
    """Why (name, prompt) cannot be saved as a preset ("" when it can): an empty prompt is "No system
    prompt", which is built in."""
    return check_prompt(prompt) or _check_entry(name, prompt)


def check_prompt(prompt: str) -> str:
    """Why `prompt` alone cannot be saved as a preset ("" when it can): asked before the preset's name."""
    return NO_PROMPT if not prompt.strip() else ""


def _check_entry(name: str, prompt: str) -> str:
    """Why (name, prompt) cannot be a preset read from the file ("" when it can). An empty prompt saved by an
    earlier version is still read: it is harmless, and a line about it at every start would be noise."""
    if not name.strip() or len(name) > MAX_NAME:
        return f"A preset needs a name of 1 to {MAX_NAME} characters."
    if name.strip() in BUILT_IN:
        return f"“{name.strip()}” is a built-in preset; choose another name."
    if len(prompt) > MAX_PROMPT:
        return f"A preset's prompt may have at most {MAX_PROMPT:,} characters."
    return ""


def _ok(name, prompt) -> bool:
    return isinstance(name, str) and isinstance(prompt, str) and not _check_entry(name, prompt)
