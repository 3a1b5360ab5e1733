"""The main window's side of the loaded model: which model loads at start (or waits, when it failed or
crashed loading last time), what the window shows while one loads, once it has, or when it failed or
was unloaded, and the memory it takes. The model itself is the chat controller's (app/controller.py).
"""

from __future__ import annotations

from pathlib import Path

import psutil
from PySide6.QtCore import QObject, QTimer, Slot

from runtime.api import format_bytes, use_models_dir

from .demo_banner import banner_key, demo_banner
from .widgets.depth_slider import slider_stops
from .window_layout import THINK_LONGER_KEY

MEMORY_MS = 2000  # how often the live strip's memory figure is read


class ModelPanel(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w, self.controller = window, window.controller
        self.held_model = ""  # a remembered model not loaded at start (it failed or crashed loading last time)
        self.load_error = ""  # the line of the last failed load: a load that works withdraws it
        self.memory_timer = QTimer(self)
        self.memory_timer.timeout.connect(self.show_memory)
        self.memory_timer.start(MEMORY_MS)
        c = self.controller
        c.sig_model_loaded.connect(self._loaded)
        c.sig_model_failed.connect(self._failed)
        c.sig_model_unloaded.connect(self._unloaded)
        c.sig_load_progress.connect(window.loading.update_progress)
        c.sig_load_cancelled.connect(self._cancelled)
        window.loading.sig_cancel.connect(c.cancel_load)
        window.models.sig_inventory.connect(self._inventory)
        window.models.sig_use.connect(self.use)
        window.models.watch(c)  # a server in use that stops answering: its row says so
        window.picker.sig_load.connect(window.models.use)
        window.picker.sig_unload.connect(c.unload_model)
        window.notes.sig_retry.connect(self._retry)
        window.banner.sig_closed.connect(self._banner_closed)

    def load_initial(self, checkpoint: str | None) -> str:
        """Loads the model asked for, the remembered one, or the demo; returns a notice for the banner."""
        from runtime.api import (
            is_spec,  # a server added in the model manager
            load_catalog,
        )

        demo = next(v.path for v in load_catalog().variants if v.bundled)
        folder = checkpoint or self.w.settings.active_model
        if folder and not is_spec(folder) and not (Path(folder) / "config.json").exists():
            self.w.notes.show_error(f"The model folder {folder} is gone; the offline demo is loaded instead. "
                                    "Pick another model in the model manager.")
            folder = ""
        why = self.controller.load_record.blocked(folder) if folder and not checkpoint else ""
        if why:  # asked for on the command line, it loads; remembered, it waits for the user
            self.held_model, folder = folder, ""
        self.load(folder or str(demo), "", is_demo=not folder)
        if why:
            self.w.notes.offer_retry(f"Load {self.held_model} again")
            return (f"{Path(self.held_model).name} was not loaded, because {why}. The demo is loaded instead; "
                    "Try again loads it, or choose another model in the model manager.")
        return ""

    @Slot()
    def _banner_closed(self) -> None:
        """Remembered, so the same banner does not return at the next launch (app/demo_banner.py)."""
        self.w.settings.demo_banner_closed = banner_key(self.w.banner.text())
        self.controller.save_settings()

    def _retry(self) -> None:
        self.controller.load_record.clear()
        self.load(self.held_model, "")

    def use(self, folder: str, resident: str) -> None:
        """The model manager's Use (or the picker's choice): loads it and remembers it for the next start."""
        from runtime.api import load_catalog

        demo = next(v.path for v in load_catalog().variants if v.bundled)
        is_demo = Path(folder).resolve() == Path(demo).resolve()
        self.w.settings.active_model = "" if is_demo else folder
        self.controller.save_settings()
        self.w.notes.retry_load.setVisible(False)  # another choice: the model held at start is no longer offered
        self.load(folder, resident, is_demo)

    def _say(self, text: str) -> None:
        """The status bar's line about the model: a passing message covers it for a moment, never ends it."""
        self.w.model_line.setText(text)

    def load(self, folder: str, resident: str, is_demo: bool = False) -> None:
        self._say(f"Loading {folder}…")
        self._set_loading(Path(folder).name)
        self.controller.load_model(folder, resident, is_demo)

    def reload_for_context(self, context: int) -> None:
        """The engine's caches are allocated at the context length: a new length loads the model again."""
        self.controller.worker.max_context = context  # read by the worker's next load (queued after this)
        loaded = self.controller.loaded
        if loaded is not None:
            self.load(loaded.folder, "", loaded.is_demo)

    def set_models_dir(self, folder: str) -> None:
        """New downloads go to `folder`; models already downloaded stay where they are."""
        use_models_dir(folder)
        self.w.notes.show_error(f"Models are now kept in {folder or 'the default folder'}. Models downloaded "
                                "before stay where they were: import their folders in the model manager, or "
                                "move them.", kind="banner")
        self.w.models.refresh()

    def _set_loading(self, name: str | None) -> None:
        """While model `name` loads, Send and the depth slider wait for it (and say so); None: it ended."""
        w = self.w
        why = f"Waiting for {name} to load" if name else ""
        for widget, tip in ((w.send_button, "Send (Enter)"), (w.depth, "")):
            widget.setEnabled(name is None)
            widget.setToolTip(why or tip)
        if name:
            w.loading.start(name)
        else:
            w.loading.finish()

    @Slot(object)
    def _loaded(self, loaded) -> None:
        from runtime.api import is_spec

        w = self.w
        w.depth.set_stops(slider_stops(loaded.levels, dict(loaded.reasons)), self.controller.depth.name)
        w.strip.set_submodels(loaded.submodels)
        path = f"{loaded.status.compute_path} · decode: {loaded.status.decode_path}"
        placement = getattr(loaded.status, "placement", "")  # a remote model's status has none
        if "RAM" in placement:  # routed experts in RAM: say where each part lives
            path += f" · {placement}"
        w.strip.set_path("CPU demo · " + path if loaded.is_demo else path)
        w.models.set_active(loaded.folder)
        w.picker.set_loaded(loaded.folder, loaded.title or loaded.name, loaded.loaded, loaded.submodels)
        w.strip.clear()  # "idle": a load stops every reply, and nothing runs until one is sent (it read the parent)
        w.think_longer_button.setToolTip(f"Give the thinking {self.controller.steering.think_longer_tokens} more "
                                         f"tokens of budget ({THINK_LONGER_KEY}); only while a reply is thinking")
        text = demo_banner(loaded.folder, loaded.default_depth)
        w.banner.setText(text)
        w.banner.setVisible(loaded.is_demo and w.settings.demo_banner_closed != banner_key(text))
        self._set_loading(None)
        self.w.notes.withdraw(self.load_error)  # (a line said since stays)
        where = "served" if is_spec(loaded.folder) else "in memory"  # a server's model is not on this PC
        self._say(f"{loaded.title or loaded.name}: {', '.join(loaded.loaded)} {where}; {loaded.status.compute_path}")
        self.show_memory()

    @Slot(object)
    def _inventory(self, inventory) -> None:
        self.w.picker.set_models(inventory.rows)

    @Slot()
    def _unloaded(self) -> None:
        w = self.w
        w.send_button.setEnabled(False)
        w.send_button.setToolTip("No model is loaded: choose one beside “Model”")
        w.picker.set_loaded("", "", (), ())
        w.models.set_active("")
        self._say("The model was unloaded: its memory is free. Choose a model to load one again")
        self.show_memory()

    @Slot()
    def _cancelled(self) -> None:
        self._set_loading(None)
        self.w.send_button.setEnabled(False)
        self._say("Loading cancelled: no model is loaded; choose one in the model manager")

    @Slot(str)
    def _failed(self, message: str) -> None:
        """The load failed after the model before it was let go (the worker frees it first): the picker says
        that no model is loaded (it kept the last one "in memory", with Unload); the manager's own
        ModelsController._model_failed says so in its table."""
        self._set_loading(None)
        self.w.send_button.setEnabled(False)
        self.w.picker.set_loaded("", "", (), ())
        self._say("No model loaded")
        self.load_error = (f"The model could not be loaded: {message}. Open the model manager to verify it, or "
                           "choose another one.")
        self.w.notes.show_error(self.load_error)

    def show_memory(self) -> None:
        rss = psutil.Process().memory_info().rss
        text = f"RAM {format_bytes(rss, 'MiB', 0)}"
        loaded = self.controller.loaded
        if loaded is not None and not loaded.is_demo:
            try:
                import torch

                if torch.cuda.is_available():
                    text = f"VRAM {format_bytes(torch.cuda.memory_allocated(), 'GiB')} · " + text
            except Exception:
                pass
        self.w.strip.set_memory(text)
