"""Takes the README's model manager screenshots of the real dialog (run under Xvfb, or any desktop):

    xvfb-run -a -s "-screen 0 1400x900x24" python tools/screenshots_model_manager.py [--out docs/screenshots]

1. model-manager-verify-nesting.png: the Verify nesting dialog after checking an imported copy of
   the demo against a slice `extract` made (a full-precision slice of the NVFP4 parent: verified
   within the quantization error)
2. model-manager-downloading.png: light theme, a recorded RTX 4090 probe, the NVFP4 30B downloading
   from a hub stand-in on 127.0.0.1 (throttled link), the imported folder with its slice verified
   (the Nesting column), the demo active
3. model-manager-dark.png: dark theme, a PC without an NVIDIA GPU, the same dialog reopened
   while the download goes on (the controller outlives the dialog)

Nothing is slowed but the stand-in hub's link; the MB/s shown is that link's.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools import screenshot_kit as kit  # noqa: E402 (after the path)

REPO = "nvidia/NVIDIA-Nemotron-Labs-3-Elastic-30B-A3B-NVFP4"


def main():
    args, work = kit.start(ROOT / "docs" / "screenshots")
    os.environ.pop("ELASTIC_CHAT_MODELS", None)
    os.environ.pop("HF_HUB_OFFLINE", None)

    import huggingface_hub.constants
    from PySide6.QtWidgets import QApplication

    from app.models_controller import ModelsController
    from app.theme import apply_theme
    from app.widgets.model_manager import ModelManager
    from runtime.checkpoint.extract import extract
    from runtime.store.catalog import load_catalog
    from runtime.store.model_store import import_folder
    from tests.hub_stub import HubStub

    huggingface_hub.constants.HF_HUB_OFFLINE = False
    app = QApplication([])

    def wait(cond, seconds=60):
        return kit.wait(app, cond, seconds, pause=0.01)

    def shoot(widget, name):
        kit.shoot(app, widget, args.out / name)

    demo = next(v for v in load_catalog().variants if v.bundled)
    import_folder(shutil.copytree(ROOT / "assets" / "demo-nvfp4", work / "my-finetune"))
    piece = extract(ROOT / "assets" / "demo", "1.0M", work / "my-finetune-1.0M")
    source = shutil.copytree(ROOT / "assets" / "demo-nvfp4", work / "repo")
    probes = ROOT / "tests" / "probes"
    with HubStub({REPO: source}) as hub:
        (source / "extra-shard.bin").write_bytes(bytes(range(256)) * (12 << 12))  # 12 MiB: time for two shots
        for name in ("model.safetensors", "extra-shard.bin"):
            hub.faults[name] = {"throttle": 0.06}  # about 1 MB/s
        os.environ["HF_ENDPOINT"] = hub.url
        apply_theme(app, "light", 11)
        models = ModelsController(str(probes / "rtx4090.json"), active=str(demo.path))
        m = ModelManager(models=models)
        m.show()
        wait(lambda: bool(m.rows) and not models.refreshing)
        m.select("my-finetune")
        dialog = m.verify_nesting()
        dialog.slice.setEditText(str(piece))
        dialog.verify_button.click()
        wait(lambda: dialog.verdict.text().startswith(("Verified", "Refused", "Nesting not")), 120)
        wait(lambda: not models.refreshing and m.row("my-finetune").fits[1].state == "verified")
        shoot(dialog, "model-manager-verify-nesting.png")
        dialog.close()
        m.select("star-elastic-30b-nvfp4")
        m.buttons["Download"].click()
        wait(lambda: "DOWNLOADING" in m.progress_text.text() and m.progress.value() > 150, 60)
        shoot(m, "model-manager-downloading.png")
        m.close()
        m.deleteLater()

        apply_theme(app, "dark", 11)
        models.probe_file = str(probes / "no_gpu.json")
        m = ModelManager(models=models)
        m.show()
        wait(lambda: bool(m.rows) and not models.refreshing)
        wait(lambda: m.progress.value() > 400, 60)
        m.select("star-elastic-30b-nvfp4")
        shoot(m, "model-manager-dark.png")
        models.shutdown()
        m.close()


if __name__ == "__main__":
    main()
