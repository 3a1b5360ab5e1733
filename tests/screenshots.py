"""Takes the README's screenshots of the real windows at 1280x720 (run under Xvfb, or any desktop):

    xvfb-run -a -s "-screen 0 1280x720x24" python tests/screenshots.py [--out docs/screenshots]

1. a reply mid-stream, light and dark: thinking block live, the live strip showing the thinking submodel
2. the finished reply (thinking collapsed to its summary), light and dark
3. the model manager during a download (from a hub stand-in on 127.0.0.1)

The model is never slowed: the mid-stream moment is caught by grabbing the window while the worker keeps
generating, so every number in the pictures (tokens/s, time to first token) is what this PC measured. If
the moment is missed (a very fast PC), the model is slowed for one more try and the live strip's speed
says so instead of showing a slowed tokens/s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SIZE = (1280, 720)


def main():
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="elastic-shots-"))
    os.environ["ELASTIC_CHAT_HOME"] = str(work / "home")

    import huggingface_hub.constants
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    import runtime.model as rm
    from app.main_window import MainWindow
    from app.settings import Settings
    from app.theme import apply_theme
    from tests.hub_stub import HubStub

    app = QApplication([])

    def wait(cond, seconds=900):  # a busy shared CPU can take minutes per reply
        end = time.time() + seconds
        while time.time() < end and not cond():
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 30)
            time.sleep(0.005)
        return cond()

    def shoot(widget, name):
        app.processEvents()
        widget.grab().save(str(args.out / name))
        print("wrote", args.out / name, f"{widget.width()}x{widget.height()}",
              f"(minimum {widget.minimumSizeHint().width()}x{widget.minimumSizeHint().height()})")

    def thinking_shown():
        c = w.controller
        r = c.reply_in(c.current)
        live = w.chat.widgets[-1] if w.chat.widgets else None
        return (r is not None and r.phase == "thinking" and r.thinking_tokens >= 8
                and live is not None and live.thinking.body.text().strip() != "")

    def mid_reply(question, name):
        """Grabs the window while the reply thinks; slows the model only if that moment was missed."""
        w.input.setPlainText(question)
        w.send()
        caught = wait(lambda: thinking_shown() or not w.controller.busy) and w.controller.busy
        if not caught:
            slow = rm.ElasticModel.forward
            rm.ElasticModel.forward = lambda *a, **k: (time.sleep(0.05), slow(*a, **k))[1]
            w.input.setPlainText(question)
            w.send()
            wait(lambda: thinking_shown() or not w.controller.busy)
            w.strip.speed.setText("tok/s: slowed for this picture")
            rm.ElasticModel.forward = slow
        shoot(w, name)
        wait(lambda: not w.controller.busy)
        print(f"{name}: {'caught at full speed' if caught else 'model slowed; speed not shown'}")

    apply_theme(app, "light", 11)
    data = work / "data"
    w = MainWindow(data, Settings(max_new_tokens=300), data / "settings.json")
    w.resize(*SIZE)
    w.show()
    wait(lambda: w.loaded is not None)
    wait(lambda: False, 8)  # the warm-up after loading
    w.controller.history.rename(w.controller.current, "Demo: sums")
    w.controller.set_depth("Balanced")  # a smaller submodel thinks, the parent answers
    mid_reply("What is 45 + 23 - 17 + 9 + 12 - 30?", "reply-mid-stream.png")
    w.input.setPlainText("hello")
    w.send()
    wait(lambda: not w.controller.busy)
    shoot(w, "reply-finished.png")

    repo = "nvidia/NVIDIA-Nemotron-Labs-3-Elastic-30B-A3B-NVFP4"
    source = shutil.copytree(ROOT / "assets" / "demo-nvfp4", work / "repo")
    os.environ.pop("HF_HUB_OFFLINE", None)
    huggingface_hub.constants.HF_HUB_OFFLINE = False
    with HubStub({repo: source}) as hub:
        hub.faults["model.safetensors"] = {"throttle": 0.25}
        os.environ["HF_ENDPOINT"] = hub.url
        w.probe_file = str(ROOT / "tests" / "probes" / "rtx4090.json")
        w.open_manager()
        m = w.manager
        wait(lambda: bool(m.rows))
        m.select("star-elastic-30b-nvfp4")
        m.buttons["Download"].click()
        wait(lambda: "DOWNLOADING" in m.progress_text.text() and m.progress.value() > 250, 60)
        shoot(m, "model-manager-downloading.png")
        m.shutdown()
        m.close()

    apply_theme(app, "dark", 11)
    w.new_chat()
    w.controller.set_depth("Max")
    mid_reply("What is 12 + 7 - 5 + 30 - 8?", "dark-mid-stream.png")
    w.controller.set_depth("Quick")
    w.input.setPlainText("What is 8 + 6?")
    w.send()
    wait(lambda: not w.controller.busy)
    shoot(w, "dark-theme.png")
    w.close()


if __name__ == "__main__":
    main()
