"""The banner over a chat with the bundled demo model (no Qt). Its accuracy figure is read from the
evaluation file that measured it (docs/results/demo-eval.json, written by `python -m training.evaluate`),
never written into the code: a retrained demo's figure shows once the evaluation is run again.

    demo_banner(Path("assets/demo-nvfp4"), "Balanced")
    -> "... right 95% of the time on 60 held-out sums at the Balanced depth (docs/results/demo-eval.md) ..."

Without a usable figure (the file missing, damaged, or not about this checkpoint or depth) the banner
says what the demo does and leaves the figure out.

Closed once, the banner stays closed at the next launches (the settings keep `banner_key` of its text);
it returns only when what it says changes: a retrained demo's new figure, or a new version's wording.
Telling the user again what they have read is noise; telling them what is new is not.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from runtime.api import JsonFileError, read_json_file

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
EVAL_FILE = ROOT / "docs" / "results" / "demo-eval.json"
MAX_EVAL_BYTES = 8 << 20  # the file is about 100 kB


def demo_banner(checkpoint: Path | str, level: str, results: Path = EVAL_FILE) -> str:
    """The banner's text for the demo `checkpoint` starting at depth `level`."""
    figure = accuracy_at(checkpoint, level, results)
    measured = (f", right {figure[0]:.0%} of the time on {figure[1]} held-out sums at the {level} depth "
                f"(docs/results/{Path(results).with_suffix('.md').name}),") if figure else ""
    return ("You are chatting with the offline demo model (1.5 million parameters, bundled with the app). It "
            "adds and subtracts chains of two to four whole numbers from 0 to 99 (\"45 + 23 - 17 + 9\")"
            f"{measured} and knows a few facts about Elastic Chat; bigger sums it tries to hand to a calculator tool "
            "(Settings → MCP servers → Add the calculator). It was trained on chats of up to twelve earlier "
            "turns: in a longer chat, start a new one (Ctrl+N). Get the real 30B model in the model manager.")


def banner_key(text: str) -> str:
    """A short fingerprint of the banner's text, kept in the settings once the user closes it."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def accuracy_at(checkpoint: Path | str, level: str, results: Path = EVAL_FILE) -> tuple[float, int] | None:
    """(accuracy, questions) of `checkpoint` at depth `level` in the evaluation file, None when it has none."""
    try:
        data = read_json_file(results, MAX_EVAL_BYTES)
        sections = [data, *(v for v in data.values() if isinstance(v, dict))]  # fp32 at the top, NVFP4 nested
        section = next(s for s in sections if isinstance(s.get("checkpoint"), str)
                       and (ROOT / s["checkpoint"]).resolve() == Path(checkpoint).resolve())
        row = next(r for r in section["stops"] if isinstance(r, dict) and r.get("stop") == level)
        accuracy, questions = row["accuracy"], data["problems"]
    except (OSError, JsonFileError, StopIteration, KeyError, TypeError) as e:
        log.info("the demo's accuracy at %s is not in %s (%s)", level, results, type(e).__name__)
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (accuracy, questions))
    return (float(accuracy), int(questions)) if numbers and 0 <= accuracy <= 1 and questions > 0 else None

