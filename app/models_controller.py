"""The model manager's state and work, outside any window: the hardware probe and the fit plan,
the rows the dialog shows, downloads and the slow tasks (verify, import, delete, the nesting
check), each in its own thread.

One `ModelsController` lives as long as the app; the model manager dialog only shows what it
says and asks it to act, so closing the dialog neither stops nor orphans a download, and a
reopened dialog shows the download where it is. Download progress arrives throttled (about
10 Hz, see `workers.DownloadWorker`). Probing (NVML), planning and reading checkpoint headers
run in a worker thread; the GUI thread only formats what they found (app/model_texts.py).

"Verify nesting…" checks a checkpoint on this PC against a sliced checkpoint (a folder or a hub
repo, `runtime.store.nesting.slice_check`) in its own thread, with progress and cancel; a verified slice
is written into the checkpoint's elastic.json and its submodel's state turns verified. A finished
download of a catalog variant whose family lists published slices tries them at once; a hub that
cannot be reached is one line, and the states stay as they were.

A server's model is probed when used, not at each refresh; after a request to it fails (a load or a
reply), its server is asked for its list of models again, and its row says "unreachable" (the reason in
its tooltip) until the server answers: a later reply, a Use, or a Refresh, which asks again.
"""

from __future__ import annotations

import html
import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import QMetaObject, QObject, Qt, QThread, Signal, Slot

from runtime.api import CONTEXT, format_bytes

from .model_texts import (
    FINAL_WORDS,
    hardware_text,
    path_text,
    placement_text,
    progress_text,
    size_text,
    verdict_text,
    verify_text,
)
from .nesting_worker import NestingWorker
from .workers import DownloadWorker, TaskRunner, start_in_thread, stop_thread

log = logging.getLogger(__name__)

ACTIONS = ("Download", "Pause", "Resume", "Cancel", "Verify", "Verify nesting…", "Delete", "Import folder…",
           "Add server…", "Use", "Refresh")


@dataclass(frozen=True)
class ModelRow:
    key: str  # catalog variant id, or a local model's name
    title: str
    format: str
    size: str
    path_text: str  # the compute path that would run it here
    fits: tuple  # runtime.store.planner.SubmodelFit, parent first
    repo: str | None
    folder: Path | None  # on disk, when it is
    local_name: str | None
    status: str  # "not downloaded", "ready", "active", "downloading 40%", a problem…
    resident: str = ""  # the submodel to load ("" = the largest that fits)
    slices: tuple[str, ...] = ()  # the catalog's published slices (hub repo ids) for its family
    remote: str = ""  # an OpenAI-compatible server's model: its spec (runtime/store/remote_sources.py)
    imported: bool = False  # a folder the user imported: removing it only takes it off the list
    status_note: str = ""  # why the status is what it is (a server's model: why it is unreachable)
    placement: str = ""  # the planner's proposal of routed experts in RAM, in words ("" = none)

    @property
    def on_disk(self) -> bool:
        return self.folder is not None and self.folder.exists()


@dataclass(frozen=True)
class Inventory:
    """What a refresh found: one line about the hardware, the suggested variant, the rows."""
    hardware: str
    suggestion: str
    rows: tuple[ModelRow, ...]


def actions(row: ModelRow | None, downloading: bool, checking: bool = False) -> dict[str, bool]:
    """Which buttons make sense for `row` (None: nothing selected); `checking`: a nesting check runs."""
    if row is None:
        return {name: name in ("Import folder…", "Add server…", "Refresh") for name in ACTIONS}
    if row.remote:  # a server's model: use it, or forget it ("Delete" removes the entry, never a file)
        return {name: name in ("Import folder…", "Add server…", "Refresh", "Delete")
                or (name == "Use" and row.status != "active")
                for name in ACTIONS}
    can_get = row.repo is not None and row.status not in ("ready", "active") and not downloading
    usable = row.on_disk and row.status in ("ready", "active") and (
        any(f.verdict != "does not fit" for f in row.fits) or not row.fits)
    return {
        "Download": can_get and row.status == "not downloaded",
        "Resume": can_get and row.status != "not downloaded",
        "Pause": downloading,
        "Cancel": downloading,
        "Verify": row.on_disk and not downloading,
        # the bundled demo's files belong to the app: its table is declared by its training, never rewritten
        "Verify nesting…": (row.on_disk and row.status in ("ready", "active") and not downloading and not checking
                            and row.local_name not in (None, "demo")),
        "Delete": row.on_disk and not downloading and row.local_name not in (None, "demo"),
        "Use": usable and row.status != "active",  # the active model is already in use
        "Import folder…": True,
        "Add server…": True,
        "Refresh": True,
    }


def gather(probe_file: str | None, context: int):
    """Worker thread: probe, plan and list (reads safetensors headers, not weights)."""
    from runtime.api import (
        ElasticError,
        catalog_slices,
        checkpoint_sizing,
        list_models,
        load_catalog,
        load_probe,
        load_sources,
        make_plan,
        models_dir,
        plan_checkpoint,
        probe,
    )

    hw = load_probe(probe_file) if probe_file else probe(models_dir())
    catalog = load_catalog()
    models = list_models()
    local, imported, slices = {}, {}, {}
    for m in models:
        v = catalog.for_repo(m.repo) if m.repo else None
        usable = m.complete and not m.problem
        try:
            if v is not None and usable:
                local[v.id] = checkpoint_sizing(m.path)
            elif m.source == "imported" and usable:
                imported[m.name] = plan_checkpoint(m.path, hw, context)
                slices[m.name] = tuple(s.repo for s in catalog_slices(m.path, catalog))
        except ElasticError as e:  # a damaged folder: its row says why, the rest still show
            log.info("cannot plan %s: %s", m.path, e)
    try:
        remotes = tuple(load_sources())
    except ElasticError as e:  # a damaged servers file: its line in the log, the rest still show
        log.warning("%s", e)
        remotes = ()
    return hw, catalog, make_plan(hw, catalog, context, local), models, imported, slices, remotes


def build_rows(catalog, plan, models, imported: dict, active: str, status_of_download,
               slices: dict | None = None, remotes=(), unreachable: dict | None = None) -> list[ModelRow]:
    """The dialog's rows: every catalog variant, then imported folders (planned from their own files);
    `slices`: an imported folder's name -> the catalog's slices for the family it is a copy of."""
    by_repo = {m.repo: m for m in models if m.repo}
    rows = []
    for vp in plan.variants:
        v = catalog.variant(vp.variant)
        local = by_repo.get(v.repo) if v.repo else next((m for m in models if m.source == "bundled"), None)
        folder = local.path if local else (v.path if v.bundled else None)
        status = status_of_download(v.id) or _status(local, active)
        resident = _resident(vp)
        family = catalog.families.get(v.family) if v.family else None
        size = size_text(vp.download_bytes or (local.size_bytes if local else 0))
        rows.append(ModelRow(v.id, v.title, v.format, size, path_text(vp), tuple(vp.submodels), v.repo, folder,
                             local.name if local else None,
                             status, resident, tuple(s.repo for s in family.slices) if family else (),
                             placement=placement_text(vp)))
    known = {r.local_name for r in rows}
    for m in models:
        if m.name in known or m.source != "imported":
            continue
        vp = imported.get(m.name)
        rows.append(ModelRow(m.name, f"{m.name} (imported)", m.format, size_text(m.size_bytes),
                             path_text(vp) if vp else "", tuple(vp.submodels) if vp else (), None, m.path, m.name,
                             _status(m, active), _resident(vp) if vp else "", (slices or {}).get(m.name, ()),
                             imported=True, placement=placement_text(vp) if vp else ""))
    return rows + remote_rows(remotes, active, unreachable)


def _resident(vp) -> str:
    """The submodel to load: "" (the parent) when it fits or routed experts in RAM let it run."""
    if vp.placement or not vp.resident or not vp.submodels or vp.resident == vp.submodels[0].name:
        return ""
    return vp.resident


UNREACHABLE = "unreachable"


def remote_rows(remotes, active: str, unreachable: dict | None = None) -> list[ModelRow]:
    """One row per server model the user added (probed when used, not at each refresh); `unreachable`:
    spec -> why its server did not answer the last time it was asked."""
    key_words = {"keyring": "key in the system keyring", "file": "key in remote_servers.json", "": "no key"}
    rows = []
    for r in remotes:
        why = (unreachable or {}).get(r.spec, "")
        status = "active" if r.spec == active else "ready"
        if why:
            status = f"{status}, {UNREACHABLE}" if status == "active" else UNREACHABLE
            why = f"The server did not answer when last asked: {why}. Use or Refresh asks it again."
        rows.append(ModelRow(r.spec, f"{r.model} on {r.address}", "server", "–",
                             f"OpenAI-compatible server, {key_words[r.key_store]}", (), None, None, None,
                             status, remote=r.spec, status_note=why))
    return rows


def probe_server(url: str, api_key: str | None, stop=None) -> list[str]:
    """Worker thread: the model ids a server lists (runtime/remote), checked; `stop()` True ends the wait."""
    from runtime.api import RemoteServer
    from runtime.api import list_server_models as list_models
    from runtime.api import server_model_choices as choices

    return choices(list_models(RemoteServer(url, api_key or None), stop))


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def same_server(url: str, own: str) -> bool:
    """Whether the address `url` reaches the server at `own` (this PC's names for itself are one; a server
    bound to every address answers on them too). An address that does not parse is not (the probe says why)."""
    from runtime.api import ElasticError, RemoteServer

    try:
        a, b = RemoteServer(url), RemoteServer(own)
    except ElasticError:
        return False
    hosts = {h if h not in LOOPBACK else "loopback" for h in (a.host, b.host)}
    everywhere = b.host in ("0.0.0.0", "::") and a.host in LOOPBACK
    return a.port == b.port and (len(hosts) == 1 or everywhere)


def reach_server(spec: str, stop) -> list[str]:
    """Worker thread: asks the server of a source's `spec` for its models (after a failure); `stop()` True
    (the app's exit, which waits for this thread) ends the wait at once."""
    from runtime.api import parse_spec, read_key

    url, _ = parse_spec(spec)
    return probe_server(url, read_key(url), stop)


def _same_folder(a, b) -> bool:
    try:
        return bool(a) and bool(b) and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _status(local, active: str) -> str:
    if local is None:
        return "not downloaded"
    if local.problem:
        return local.problem
    return "active" if _same_folder(local.path, active) else "ready"


class ModelsController(QObject):
    sig_inventory = Signal(object)  # Inventory, after each refresh (and each change of a row's status)
    sig_progress = Signal(str, object)  # row key, runtime.store.download.transfer.Progress (throttled)
    sig_message = Signal(str)  # one line about the last thing that happened
    sig_changed = Signal()  # the set of models on this PC changed
    sig_use = Signal(str, str)  # checkpoint folder, resident submodel ("" = the largest that fits)
    sig_nesting = Signal(str, str, bool)  # row key, one line (progress, then the verdict), whether it still runs

    def __init__(self, probe_file: str | None = None, context: int = CONTEXT.default, active: str = "", parent=None):
        super().__init__(parent)
        self.probe_file, self.context, self.active = probe_file, context, active
        self.inventory: Inventory | None = None
        self.message = ""
        self.progress: dict[str, object] = {}  # latest Progress per download, kept after it ends
        self.downloads: dict[str, tuple[DownloadWorker, QThread]] = {}
        self.tasks = TaskRunner(self)
        self.nesting: tuple[str, NestingWorker, QThread, str] | None = None  # key, worker, thread, line prefix
        self._parts = None  # what the last refresh gathered, to rebuild rows without probing again
        self._generation = 0
        self.refreshing = False
        self.unreachable: dict[str, str] = {}  # a server model's spec -> why its server did not answer
        self.asking: set[str] = set()  # specs whose server is being asked now
        self.closing = threading.Event()  # set at shutdown: a server still being asked is hung up on
        self.local_server = None  # this app's own server (app/server_control.py ServerControl), from `watch`

    # ------------------------------------------------------------------ state

    def rows(self) -> tuple[ModelRow, ...]:
        return self.inventory.rows if self.inventory else ()

    def row(self, key: str | None) -> ModelRow | None:
        return next((r for r in self.rows() if r.key == key), None)

    def plan_for(self, folder) -> ModelRow | None:
        """The row of a checkpoint folder, from the last refresh (no probing)."""
        return next((r for r in self.rows() if r.folder is not None and _same_folder(r.folder, folder)), None)

    def actions(self, key: str | None) -> dict[str, bool]:
        return actions(self.row(key), key in self.downloads, self.nesting is not None)

    def refresh(self) -> None:
        """Probe, plan and list again, in a worker thread; a newer refresh wins over an older one."""
        self._generation += 1
        generation = self._generation
        self.refreshing = True
        for spec in list(self.unreachable):  # ready again once it answers
            self.ask_server(spec)
        self.tasks.run(gather, (self.probe_file, self.context),
                       lambda parts: self._gathered(generation, parts),
                       lambda error: self._failed(f"Could not list the models: {error}"))

    def _gathered(self, generation: int, parts) -> None:
        if generation != self._generation:
            return
        self.refreshing = False
        self._parts = parts
        self._rebuild()

    def _rebuild(self) -> None:
        if self._parts is None:
            return
        hw, catalog, plan, models, imported, slices, remotes = self._parts
        rows = build_rows(catalog, plan, models, imported, self.active, self._download_status, slices, remotes,
                          self.unreachable)
        why = plan.default_reason
        if hw.gpu is None:  # the planner's line brackets the no-GPU reason, which may hold brackets itself
            why = "Without an NVIDIA GPU the bundled demo model runs on the CPU."
        suggestion = f"Suggested: <b>{html.escape(catalog.variant(plan.default).title)}</b>. {html.escape(why)}"
        self.inventory = Inventory(f"<b>Hardware:</b> {html.escape(hardware_text(hw))}", suggestion, tuple(rows))
        self.sig_inventory.emit(self.inventory)

    def _download_status(self, key: str) -> str:
        if key not in self.downloads:
            return ""
        p = self.progress.get(key)
        return f"{p.state} {int(100 * p.fraction)}%" if p is not None else "queued"

    def set_active(self, folder: str) -> None:
        """The checkpoint the engine has loaded (its row says "active" and cannot be used again)."""
        if folder != self.active:
            self.active = folder
            self._rebuild()

    def _say(self, text: str) -> None:
        self.message = text
        self.sig_message.emit(text)

    def _failed(self, text: str) -> None:
        self.refreshing = False
        self._say(text)

    # ------------------------------------------------------------------ servers' reachability

    def watch(self, chat) -> None:
        """Follows the chat controller's loads and replies (app/controller.py): a failed request to the
        server in use has its server asked again; a reply or a load that worked marks it reachable."""
        self.local_server = chat.server
        chat.sig_model_loaded.connect(self._model_loaded)
        chat.sig_model_failed.connect(self._model_failed)
        chat.sig_reply_done.connect(self._reply_done)

    @Slot(object)
    def _model_loaded(self, loaded) -> None:
        self._answered(loaded.folder)

    @Slot(str)
    def _model_failed(self, _message: str) -> None:
        from runtime.api import is_spec

        spec = self.active
        self.set_active("")  # nothing is loaded now (the worker released the model before loading or connecting)
        if is_spec(spec):
            self.ask_server(spec)

    @Slot(int, object)
    def _reply_done(self, _cid: int, message) -> None:
        from runtime.api import is_spec

        if not is_spec(self.active):
            return
        if message.meta.get("finish_reason") == "error":
            self.ask_server(self.active)
        elif message.content or message.thinking:
            self._answered(self.active)

    def ask_server(self, spec: str) -> None:
        """Asks the server of `spec` for its models in a worker thread; its row says what came of it."""
        if spec in self.asking:
            return
        self.asking.add(spec)
        self.tasks.run(reach_server, (spec, self.closing.is_set), lambda _ids: self._answered(spec),
                       lambda error: self._unreachable(spec, error))

    def _answered(self, spec: str) -> None:
        self.asking.discard(spec)
        if self.unreachable.pop(spec, None) is not None:
            self._rebuild()

    def _unreachable(self, spec: str, error: str) -> None:
        self.asking.discard(spec)
        why = error.rstrip(".")
        if self.unreachable.get(spec) != why:
            self.unreachable[spec] = why
            self._rebuild()
            self._say(f"The server is unreachable: {why}.")

    # ------------------------------------------------------------------ downloads

    def download(self, key: str) -> None:
        from runtime.api import download_dir

        r = self.row(key)
        if r is None or r.repo is None or key in self.downloads:
            return
        worker = DownloadWorker(r.repo, download_dir(r.repo))
        thread = start_in_thread(worker, f"download {r.repo}")
        worker.sig_progress.connect(self._on_progress)
        worker.sig_finished.connect(self._on_finished)
        self.downloads[key] = (worker, thread)
        self.progress.pop(key, None)
        self._set_status(key, "queued")
        self._say(f"Resolving {r.repo} on the hub…")
        QMetaObject.invokeMethod(worker, "run", Qt.ConnectionType.QueuedConnection)

    def _key_of(self, worker) -> str | None:
        return next((k for k, (w, _) in self.downloads.items() if w is worker), None)

    def _set_status(self, key: str, status: str) -> None:
        if self.inventory is None:
            return
        rows = tuple(replace(r, status=status) if r.key == key else r for r in self.inventory.rows)
        self.inventory = replace(self.inventory, rows=rows)
        self.sig_inventory.emit(self.inventory)

    @Slot(object)
    def _on_progress(self, p) -> None:
        key = self._key_of(self.sender())
        if key is None:
            return
        self.progress[key] = p
        self.message = progress_text(p)
        self.sig_progress.emit(key, p)

    @Slot(object, str)
    def _on_finished(self, final, error: str) -> None:
        key = self._key_of(self.sender())
        if key is None:
            return
        _, thread = self.downloads.pop(key)
        stop_thread(thread)
        if final is not None:
            self.progress[key] = final
            self.sig_progress.emit(key, final)
        self._say(f"Download failed: {error}" if error else FINAL_WORDS.get(getattr(final, "state", ""), "Stopped."))
        self.sig_changed.emit()
        self.refresh()
        if not error and getattr(final, "state", "") == "done":
            self._try_catalog_slices(key)

    def pause(self, key: str) -> None:
        if key in self.downloads:
            self.downloads[key][0].pause()

    def cancel(self, key: str) -> None:
        if key in self.downloads:
            self.downloads[key][0].cancel()

    # ------------------------------------------------------------------ tasks

    def verify(self, key: str) -> None:
        from runtime.api import verify

        r = self.row(key)
        if r and r.folder:
            self._say(f"Verifying {r.folder}… (hashing can take a minute for big files)")
            name = r.local_name or ""  # the row's name, not its folder's
            self.tasks.run(verify, (r.folder,), lambda report: self._say(verify_text(report, name)), self._task_failed)

    def delete(self, key: str) -> None:
        """Deletes a downloaded model or forgets an imported one; the dialog has asked the user."""
        from runtime.api import delete, remove_source

        r = self.row(key)
        if r and r.remote and r.key != self.active:
            self.tasks.run(remove_source, (r.remote,), self._changed, self._task_failed)
        elif r and r.local_name and key not in self.downloads:
            self.tasks.run(delete, (r.local_name,), self._changed, self._task_failed)

    def probe_server(self, url: str, api_key: str | None, on_done, on_failed) -> None:
        """Lists a server's models in a worker thread: `on_done(ids)` or `on_failed(line)`, on the GUI thread.
        This app's own server is refused at once: it serves the model loaded here, and a chat on it has
        nothing to answer (Use failed with a 503 nested three times and "try again")."""
        own = self.local_server.status().address if self.local_server is not None else ""
        if own and same_server(url, own):
            on_failed(f"{url.strip()} is this app's own server (Settings → Server): it serves the model loaded "
                      "here, so it cannot be the model to chat with. Enter another machine's address.")
            return
        self.tasks.run(probe_server, (url, api_key), on_done, on_failed)

    def add_server(self, url: str, model: str, api_key: str | None) -> None:
        """Adds a server's model as a source (its key to the keyring where there is one) and lists it."""
        from runtime.api import add_source

        def added(source) -> None:
            self._changed(f"Added {source.model} on {source.address}.")

        self.tasks.run(add_source, (url, model, api_key), added, self._task_failed)

    def import_folder(self, folder) -> None:
        from runtime.api import import_folder

        self._say(f"Checking {folder}…")
        self.tasks.run(import_folder, (Path(folder),), lambda m: self._changed(f"Imported {m.name}."),
                       self._task_failed)

    def _changed(self, message: str) -> None:
        self._say(message[:1].upper() + message[1:])
        self.sig_changed.emit()
        self.refresh()

    def _task_failed(self, error: str) -> None:
        self._say(f"Failed: {error}")

    def use(self, key: str) -> None:
        """Loads this checkpoint, resident on the submodel the plan chose (already computed)."""
        r = self.row(key)
        if r is None or not actions(r, key in self.downloads)["Use"]:
            return
        where = r.remote or str(r.folder)  # a server's spec travels where a folder does
        self.set_active(where)
        self.sig_use.emit(where, r.resident)

    # ------------------------------------------------------------------ nesting

    def verify_nesting(self, key: str, where: str, revision: str | None = None) -> None:
        """Checks the row's checkpoint against `where` (a hub repo id or a folder) in a worker thread."""
        from runtime.api import check_slice

        r = self.row(key)
        if r is None or not self.actions(key)["Verify nesting…"]:
            return
        folder, where = r.folder, (where or "").strip()
        self._start_nesting(key, lambda stop, on_read: [check_slice(folder, where, revision, stop=stop,
                                                                    on_read=on_read)],
                            f"Verifying the nesting of {r.title} against {where}…", "")

    def _try_catalog_slices(self, key: str) -> None:
        """After a download: the family's published slices, checked against the new folder."""
        from runtime.api import check_catalog_slices, download_dir

        r = self.row(key)
        if r is None or not r.slices or r.repo is None:
            return
        prefix = FINAL_WORDS["done"] + " "
        if self.nesting is not None:
            self._say(prefix + "Nesting not checked (another check is running): use Verify nesting… when it ends.")
            return
        folder = download_dir(r.repo)
        self._start_nesting(key, lambda stop, on_read: check_catalog_slices(folder, stop=stop, on_read=on_read),
                            prefix + f"Checking the nesting against {', '.join(r.slices)}…", prefix)

    def _start_nesting(self, key: str, job, first_line: str, prefix: str) -> None:
        worker = NestingWorker(job)
        thread = start_in_thread(worker, "nesting check")
        worker.sig_progress.connect(self._on_nesting_progress)
        worker.sig_finished.connect(self._on_nesting_finished)
        self.nesting = (key, worker, thread, prefix)
        self._say(first_line)
        self.sig_nesting.emit(key, first_line, True)
        if self.inventory is not None:
            self.sig_inventory.emit(self.inventory)  # the buttons: one check at a time
        QMetaObject.invokeMethod(worker, "run", Qt.ConnectionType.QueuedConnection)

    def cancel_nesting(self) -> None:
        if self.nesting is not None:
            self.nesting[1].cancel()

    @Slot(int)
    def _on_nesting_progress(self, total: int) -> None:
        if self.nesting is None or self.sender() is not self.nesting[1]:
            return
        self.sig_nesting.emit(self.nesting[0], f"Checking the nesting: {format_bytes(total)} read…", True)

    @Slot(object, str)
    def _on_nesting_finished(self, verdicts, error: str) -> None:
        if self.nesting is None or self.sender() is not self.nesting[1]:
            return
        key, _, thread, prefix = self.nesting
        self.nesting = None
        stop_thread(thread)
        if error:
            line = f"The nesting check failed: {error}. The submodels' states are unchanged."
        else:
            line = " ".join(verdict_text(v) for v in verdicts) or "No slice to check against."
            row = self.row(key)
            if row is not None and row.status == "active" and any(v.verified for v in verdicts):
                line += " The model in use runs on its old table until it is loaded again."
        self._say(prefix + line)
        self.sig_nesting.emit(key, prefix + line, False)
        self.refresh()  # a verified submodel's state, and the buttons

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> None:
        """Pauses running downloads (they resume next time) and stops every thread."""
        self.closing.set()
        for worker, thread in list(self.downloads.values()):
            worker.blockSignals(True)
            worker.pause()
            stop_thread(thread)
        self.downloads.clear()
        if self.nesting is not None:
            _, worker, thread, _ = self.nesting
            worker.blockSignals(True)
            worker.cancel()
            stop_thread(thread)
            self.nesting = None
        self.tasks.shutdown()
