"""What one frame of a growing reply costs the GUI thread: a chat view (offscreen, 900x700) shows a reply
whose thought, or answer, grows by --step characters per frame, as the flush sends it (`ChatView.stream`,
then the event loop lays it out, and the view is painted whole); the GUI thread's CPU time per frame is
printed for texts of several lengths. The answer comes in three shapes: paragraphs (each rendered once,
when finished), one long paragraph and one long code block (the block being written, shown as it grows).
Every millisecond here is one the engine's worker thread may wait for the GIL.

    python benchmarks/bench_stream_frame.py [--frames 30] [--step 40]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (500, 2000, 6500)
WORDS = "so the tens column carries one and the units give seven, then we add the next number: "
CODE = "x = compute(a, b, c)  # a line of code\n"


def thought(n: int) -> str:
    text = ""
    line = 0
    while len(text) < n:
        line += 1
        text += WORDS + ("\n" if line % 3 == 0 else "")
    return text[:n]


SHAPES = {  # name -> (the text of n characters, whether it is the thought)
    "thought": (thought, True),
    "answer: paragraphs": (lambda n: thought(n).replace("\n", "\n\n"), False),
    "answer: one paragraph": (lambda n: (WORDS * (n // len(WORDS) + 1))[:n], False),
    "answer: one code block": (lambda n: ("```python\n" + CODE * (n // len(CODE) + 1))[:n], False),
}


def frame_ms(shape: str, size: int, frames: int, step: int) -> float:
    """The mean GUI-thread CPU per frame while a text grows from `size` by `step` characters a frame."""
    from PySide6.QtWidgets import QApplication

    from app.state.history import Message
    from app.widgets.chat_view import ChatView

    make, is_thought = SHAPES[shape]
    app = QApplication.instance()
    view = ChatView()
    view.resize(900, 700)
    view.show()
    view.show_chat(1, [Message(1, 1, "user", "What is 45 + 23 - 17 + 9?", "", {}, True),
                       Message(2, 1, "assistant", "", "", {}, False)], 2)
    text = make(size + step * frames)

    def show(n: int) -> None:
        view.stream(1, 2, "" if is_thought else text[:n], text[:n] if is_thought else "", "0.5M", is_thought)

    show(size)
    app.processEvents()
    spent = 0.0
    for i in range(1, frames + 1):
        started = time.thread_time()
        show(size + i * step)
        app.processEvents()  # the layout the update asked for
        view.viewport().repaint()  # and a paint of all of it shown (at once: not left to the next frame)
        spent += time.thread_time() - started
    view.close()
    view.deleteLater()
    app.processEvents()
    return spent / frames * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--step", type=int, default=40, help="characters added per frame")
    args = ap.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.theme import apply_theme

    app = QApplication([])
    apply_theme(app, "light", 11)
    print("| text | " + " | ".join(f"{n:,} chars (ms/frame)" for n in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    for shape in SHAPES:
        print(f"| {shape} | " + " | ".join(f"{frame_ms(shape, n, args.frames, args.step):.1f}" for n in SIZES) + " |")


if __name__ == "__main__":
    main()
