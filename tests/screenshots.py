"""Takes the README's screenshots of the real windows (run under Xvfb, or any desktop):

    xvfb-run -a -s "-screen 0 1400x900x24" python tests/screenshots.py [--out docs/screenshots]

1. a reply mid-stream: thinking block live, the live strip showing the thinking submodel
2. the finished reply (thinking collapsed to its summary)
3. the model manager during a download (from a hub stand-in on 127.0.0.1)
4. the dark theme

The demo model is slowed to about 15 tokens/s so the mid-stream moment can be caught.
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


def main():
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

    slow = rm.ElasticModel.forward
    rm.ElasticModel.forward = lambda *a, **k: (time.sleep(0.06), slow(*a, **k))[1]
    app = QApplication([])

    def wait(cond, seconds=60):
        end = time.time() + seconds
        while time.time() < end and not cond():
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 30)
            time.sleep(0.01)
        return cond()

    def shoot(widget, name):
        app.processEvents()
        widget.grab().save(str(args.out / name))
        print("wrote", args.out / name)

    apply_theme(app, "light", 11)
    data = work / "data"
    w = MainWindow(data, Settings(max_new_tokens=300), data / "settings.json")
    w.resize(1280, 820)
    w.show()
    wait(lambda: getattr(w, "loaded", None) is not None)
    w.controller.history.rename(w.controller.current, "Demo: sums")
    w.depth.set_stops(w.depth.stops, "Balanced")
    w.input.setPlainText("What is 45 + 23 - 17 + 9?")
    w.send()
    thinking = w.loaded.submodels[1]
    wait(lambda: w.controller.reply is not None and w.controller.reply.phase == "thinking"
         and "".join(w.controller.reply.thinking).count("\n") >= 1 and w.streaming.thinking.body.text())
    shoot(w, "reply-mid-stream.png")
    wait(lambda: not w.controller.busy)
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
    w.depth.set_stops(w.depth.stops, "Quick")
    w.input.setPlainText("What is 12 + 7 - 5?")
    w.send()
    wait(lambda: not w.controller.busy)
    shoot(w, "dark-theme.png")
    w.close()
    print(f"thinking submodel in the mid-stream shot: {thinking}")


if __name__ == "__main__":
    main()
