"""Workers that keep the GUI thread free: each lives in its own QThread.

- `EngineWorker` owns the engine (`runtime.api.ChatEngine`: a model on this PC, or one on another
  server, held the same way): loads or connects, streams replies. Events cross threads as the
  runtime's frozen dataclasses, tagged with a request id so the GUI can drop late events of a reply
  it stopped, through an `Outbox` the GUI empties at its frame rate (app/event_outbox.py: no signal
  per token). Stop does not queue behind the decode loop: the GUI sets the thread-safe `Controls`
  flag directly. The engine sits in an `EngineQueue` shared with the local server
  (app/server_control.py): each chat reply waits its turn in that one line, and loading or unloading
  holds it alone, so the server never runs on a model being replaced.
- `DownloadWorker` runs one download; pause and cancel go straight to the thread-safe
  `Download` object.
- `TaskWorker` runs one blocking function (verify, import, probe) and reports its result.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QMetaObject, QObject, Qt, QThread, Signal, Slot

from runtime.api import (
    CANCELLED,
    CONTEXT,
    PAUSED,
    ChatEngine,
    ChatRequest,
    Controls,
    Download,
    DownloadProgress,
    ElasticError,
    Engine,
    EngineQueue,
    Event,
    ExpertPlacement,
    HardwareProbe,
    LoadCancelled,
    MetadataStopped,
    RemoteEngine,
    RemoteServer,
    SamplingSettings,
    UsageError,
    apply_threads,
    check_cpu_fit,
    check_destination,
    describe,
    folder_table,
    hub_token,
    is_panic,
    is_spec,
    load_probe,
    models_dir,
    name_of,
    parse_spec,
    plan_checkpoint,
    probe,
    read_key,
    resolve,
    stream_in_turn,
)

from .context_fit import KEEP_SYSTEM, fit_messages, longest_context, reply_room
from .event_outbox import Outbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    """What the GUI needs to know about the engine it cannot touch."""
    folder: str  # a checkpoint folder, or a server's model spec (runtime/store/remote_sources.py)
    name: str
    status: object  # runtime.engine.EngineStatus, or runtime.remote.engine.RemoteStatus
    levels: tuple  # runtime.depth.DepthLevel, for the slider
    submodels: tuple[str, ...]  # every submodel, smallest first
    loaded: tuple[str, ...]  # those that can run
    is_demo: bool
    reasons: tuple[tuple[str, str], ...] = ()  # (submodel, why it is not in memory): the planner's one-liners
    default_depth: str = ""  # ChatEngine.default_depth(): never a level whose thinker's widths are only estimated
    thinking_ceiling: int = 0  # ChatEngine.thinking_ceiling: the Max level's budget, "Think longer"'s unit
    context_ceiling: int = 0  # the longest context the memory plan allows (0: no plan could be made)
    title: str = ""  # what the models list calls it (a folder "demo" imported as "demo-2"); `name` is its id

    @classmethod
    def of(cls, engine: ChatEngine, folder: str, name: str, is_demo: bool = False, reasons=(),
           context_ceiling: int = 0) -> LoadedModel:
        return cls(folder, name, engine.status(), tuple(engine.depth_levels()), tuple(engine.all_submodels_by_size()),
                   tuple(engine.submodels_by_size()), is_demo, tuple(reasons), engine.default_depth(),
                   engine.thinking_ceiling, context_ceiling)


class ReplyJob(Protocol):
    """What `EngineWorker.generate` runs: a plain reply (`PlainReply`) or one with tools
    (app/tools_controller.py `ToolJob`), given the stream that takes a turn on the engine."""
    request: ChatRequest

    def prepare(self) -> Event | None:
        """Readies the reply in the engine thread (a ToolJob starts its servers); an event to show, or None."""

    def run(self, stream: Callable[[ChatRequest, Controls], Iterator[Event]], controls: Controls) -> Iterator[Event]:
        """The reply's events, each round through `stream`."""


@dataclass(frozen=True)
class PlainReply:
    """A reply with no tools: one turn of the stream."""
    request: ChatRequest

    def prepare(self) -> None:
        return None

    def run(self, stream, controls: Controls) -> Iterator[Event]:
        return stream(self.request, controls)


def start_in_thread(worker: QObject, name: str) -> QThread:
    thread = QThread()
    thread.setObjectName(name)
    worker.moveToThread(thread)
    thread.start()
    return thread


def stop_thread(thread: QThread) -> None:
    thread.quit()
    thread.wait()


PROGRESS_S = 0.1  # at most 10 load-progress updates a second cross to the GUI


class EngineWorker(QObject):
    sig_loaded = Signal(object)  # LoadedModel
    sig_load_failed = Signal(str)
    sig_load_progress = Signal(object)  # runtime.checkpoint.reader.LoadProgress (throttled)
    sig_load_cancelled = Signal()
    sig_events = Signal()  # the outbox holds an event the GUI should take now, not at its next frame
    sig_reply_failed = Signal(int, str)
    sig_fitted = Signal(int, int, int)  # request id, the prompt's tokens, messages left out to fit the context
    # request id, the prompt's tokens, the most it may have, the context, whether leaving out turns would fit
    sig_overflow = Signal(int, int, int, int, bool)

    def __init__(self, max_context: int = CONTEXT.default, probe_file: str | None = None, load_record=None):
        """`load_record`: an app.crash.LoadRecord, told when a checkpoint (not the demo) starts and ends
        loading, so a model that failed or crashed the process is not loaded again without asking."""
        super().__init__()
        self.load_record = load_record
        self.engine: ChatEngine | None = None  # a model on this PC, or a server's (RemoteEngine)
        self.queue = EngineQueue()  # the one line for the engine: chat replies, server requests, loads
        self.outbox = Outbox()  # (request id, runtime event) for the GUI thread, taken at its frame rate
        self.max_context = max_context
        self.probe_file = probe_file
        self.cancel_requested = threading.Event()  # set by the GUI thread (cancel_load), read between tensors
        self._warming = None  # the warm-up reply's runtime.controls.Controls while it runs
        self._progress_at = 0.0

    def cancel_load(self) -> None:
        """Called from the GUI thread (Cancel, or quitting): the load in progress stops before its next
        tensor, the warm-up within a token."""
        self.cancel_requested.set()
        warming = self._warming
        if warming is not None:
            warming.stop()

    def _progress(self, p) -> None:
        now = time.monotonic()
        if now - self._progress_at >= PROGRESS_S or p.tensors_read >= p.tensors_total:
            self._progress_at = now
            self.sig_load_progress.emit(p)

    @Slot(str, str, bool)
    def load(self, folder: str, resident: str, is_demo: bool) -> None:
        """Plans once (here, off the GUI thread), loads, then warms the engine up with a tiny reply; or,
        for a server's model, connects. The whole of it holds the engine queue alone: every reply in
        flight or waiting (the server's too) is stopped first, and server requests meanwhile get 503
        (then wait during the warm-up)."""
        self.cancel_requested.clear()
        remote = is_spec(folder)
        record = self.load_record if not (is_demo or remote) else None
        if record is not None:
            record.begin(folder)
        error = ""
        try:
            with self.queue.exclusive(f"the model {folder if remote else Path(folder).name} is loading"):
                self._release()
                error = self._connect(folder) if remote else self._load(folder, resident, is_demo)
        finally:  # a crash (a segfault) never gets here: the record then says it was loading
            if record is not None:
                record.end(folder, error)

    def _failed(self, message: str) -> str:
        self.queue.set_failed(message)
        self.sig_load_failed.emit(message)
        return message

    def _connect(self, spec: str) -> str:
        """A model on an OpenAI-compatible server (runtime/store/remote_sources.py's spec): probed with
        /v1/models here, off the GUI thread. It is the window's alone: the app's own server has no model
        meanwhile (503). Returns why it failed ("" when it did not)."""
        try:
            url, model = parse_spec(spec)
            engine = RemoteEngine.connect(RemoteServer(url, read_key(url)), model, self.cancel_requested.is_set)
        except ElasticError as e:
            return self._failed(str(e))
        self.engine = engine
        self.queue.set_engine(engine, shared=False)
        self.sig_loaded.emit(LoadedModel.of(engine, spec, f"{model} on {engine.server.address}"))
        return ""

    def _load(self, folder: str, resident: str, is_demo: bool) -> str:
        """Loads and warms up; returns why the load failed ("" when it did not, or was cancelled)."""
        try:
            hw_plan = None if is_demo else self._plan(folder)
            before = hw_plan[0] if hw_plan is not None else _ram_probe()  # memory free before the weights
            placement = None
            if hw_plan is not None and not resident:
                resident, placement = self._largest_that_fits(hw_plan)
            apply_threads()  # the engine's CPU thread count: runtime/threads.py
            self.engine = Engine.load(folder, resident=resident or None, max_context=self.max_context,
                                      device="cpu" if is_demo else None, table=folder_table(folder),
                                      progress=self._progress, cancelled=self.cancel_requested.is_set,
                                      preflight=check_cpu_fit, placement=placement)
        except LoadCancelled:
            self.queue.set_failed("loading was cancelled")
            self.sig_load_cancelled.emit()
            return ""
        except ElasticError as e:
            return self._failed(str(e))
        except BaseException as e:  # out of memory, a driver problem, a native panic: report it, keep the app alive
            if not _caught(e):
                raise
            log.exception("loading %s failed", folder)
            return self._failed(_describe(e))
        self.queue.set_engine(self.engine)
        e = self.engine
        loaded = tuple(e.submodels_by_size())
        by_name = {f.name: f.reason for f in hw_plan[1].submodels} if hw_plan is not None else {}
        reasons = [(n, by_name.get(n, f"{n} is not in memory")) for n in e.all_submodels_by_size() if n not in loaded]
        self.sig_loaded.emit(replace(LoadedModel.of(e, folder, Path(folder).name, is_demo, reasons,
                                                    self._context_ceiling(folder, before)), title=name_of(folder)))
        # The window is usable while this runs; a reply sent meanwhile (the chat's or the server's) waits
        # in the queue and starts right after it, warm.
        log.info("warmed up %s in %.0f ms", Path(folder).name, self._warm_up(loaded))
        return ""

    def _context_ceiling(self, folder: str, before) -> int:
        """The longest context the memory plan allows the resident submodel (0: no plan could be made)."""
        try:
            model = self.engine.model
            return longest_context(folder, before, model.resident.name, on_cpu=model.device.type == "cpu",
                                   placement=model.placement.spec if model.placement.active else None)
        except Exception as e:  # the dialog then offers the registry's range and says the plan is missing
            log.warning("no context ceiling for %s: %s", folder, e)
            return 0

    def _plan(self, folder: str):
        """The fit plan for this checkpoint on this PC (or the recorded probe); None when it cannot be made."""
        try:
            hw = load_probe(self.probe_file) if self.probe_file else probe()
            return hw, plan_checkpoint(Path(folder), hw, self.max_context)
        except BaseException as e:  # the plan explains and picks; loading the parent still works without it
            if not _caught(e):
                raise
            log.warning("no fit plan for %s: %s", folder, _describe(e))
            return None

    @staticmethod
    def _largest_that_fits(hw_plan) -> tuple[str, ExpertPlacement | None]:
        """On a GPU where the parent does not fit: the planner's placement of routed experts in RAM, which
        runs every submodel (runtime/placement.py), else the largest submodel that fits. Returns the
        resident submodel ("" for the parent) and the placement (None: none)."""
        hw, plan = hw_plan
        if hw.gpu is None:
            return "", None  # the CPU: the user asked for this checkpoint, run its parent
        if plan.placement is not None:
            return "", ExpertPlacement.parse(plan.placement)
        if plan.resident is None:
            raise UsageError("no submodel of this checkpoint fits the GPU: " + plan.submodels[-1].reason)
        return plan.resident, None

    def _warm_up(self, submodels) -> float:
        """One two-token reply per submodel in memory, so the user's first reply does not pay for first-call
        work (allocations, kernel selection, lazy unpacking); returns its milliseconds."""
        started = time.perf_counter()
        for name in submodels:
            self._warming = controls = Controls()
            if self.cancel_requested.is_set():  # quitting: a warm-up is not worth waiting for
                log.info("warm-up cancelled before %s", name)
                self._warming = None
                break
            request = ChatRequest(({"role": "user", "content": "hi"},), None, name, 0, 2, SamplingSettings(0.0))
            try:
                for _ in self.engine.stream(request, controls):
                    pass
            except BaseException as e:  # a courtesy: the first real reply reports any problem (a panic too)
                if not _caught(e):
                    raise
                log.warning("warm-up on %s failed: %s", name, _describe(e))
            finally:
                self._warming = None
        return round((time.perf_counter() - started) * 1000, 1)

    @Slot()
    def unload(self) -> None:
        """Drops the engine and frees its memory (the GPU's too), once no reply runs on it: replies in
        flight or waiting (the server's too) are stopped, and this waits for the engine to be free."""
        if self.engine is None:
            return
        with self.queue.exclusive("the model is being unloaded"):
            self._release()
            self.queue.set_engine(None)

    def _release(self) -> None:
        """Frees the engine; only while holding the queue alone (inside `queue.exclusive`)."""
        if self.engine is None:
            return
        self.engine.release()
        self.engine = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass

    @Slot(int, object, object, str)
    def generate(self, request_id: int, job: ReplyJob, controls: Controls, overflow: str = "refuse") -> None:
        """One chat reply, in its turn (each round of a reply with tools takes a turn of its own): it waits
        behind server requests that came first (a stop while it waits ends it at once, with nothing
        generated; with no model loaded it ends with an error). First the chat is fitted to the context
        under the `overflow` policy (app/context_fit.py): `sig_fitted` says what is sent; a chat that
        cannot fit gets `sig_overflow` and no reply."""
        def stream(request: ChatRequest, c: Controls) -> Iterator[Event]:
            return stream_in_turn(self.queue, request, c, "chat")
        try:
            ready = job.prepare()  # a ToolJob's servers start and its tools join the request, fitted with them
            if ready is not None:
                self._post(request_id, ready)
            fitted = self._fit(request_id, job.request, overflow)
            if fitted is None:
                return
            for event in dataclasses.replace(job, request=fitted).run(stream, controls):
                self._post(request_id, event)
        except BaseException as e:  # bad request values, a native panic: the reply fails, the app does not
            if not _caught(e):
                raise
            log.exception("reply %s failed", request_id)
            self.sig_events.emit()  # the events before the failure go first (queued signals keep their order)
            self.sig_reply_failed.emit(request_id, _describe(e))

    def _post(self, request_id: int, event: Event) -> None:
        """One event for the GUI: a Token waits for the GUI's next frame, anything else wakes it."""
        if self.outbox.put(request_id, event):
            self.sig_events.emit()

    def _fit(self, request_id: int, request: ChatRequest, overflow: str) -> ChatRequest | None:
        """The request with its messages fitted to the engine's context (None: it cannot fit). A chat
        whose tokens cannot be counted here (a server's model) goes as it is; so does one with no model
        (the queue's turn says "no model is loaded")."""
        engine = self.engine
        count = engine.token_counter(request) if engine is not None else None
        if count is None:
            return request
        limit = engine.max_context - reply_room(engine.max_context, request.max_new_tokens)
        fit = fit_messages(request.messages, count, limit, overflow)
        if not fit.fits:
            trimmable = overflow != KEEP_SYSTEM and fit_messages(request.messages, count, limit, KEEP_SYSTEM).fits
            self.sig_overflow.emit(request_id, fit.tokens, limit, engine.max_context, trimmable)
            return None
        self.sig_fitted.emit(request_id, fit.tokens, fit.dropped)
        return dataclasses.replace(request, messages=fit.messages) if fit.dropped else request


def _ram_probe():
    """This machine's RAM now, as the planner reads it (the CPU's memory plan needs nothing else)."""
    import psutil

    vm = psutil.virtual_memory()
    return HardwareProbe((), int(vm.total), int(vm.available), 0, "the model runs on the CPU")


def _caught(e: BaseException) -> bool:
    """What a worker reports instead of dying: any Exception, and a native library's panic
    (runtime/native.py), which is a BaseException that `except Exception` lets through."""
    return isinstance(e, Exception) or is_panic(e)


def _describe(e: BaseException) -> str:
    text = describe(e, 300) if is_panic(e) else f"{type(e).__name__}: {e}"
    if "out of memory" in text.lower():
        return "out of memory: choose a lower reasoning depth or a smaller model in the model manager"
    return text


class Throttle:
    """Lets a stream of updates through at most every `interval_s`, and always when its kind
    changes (so a state change is never hidden behind a fresh progress tick)."""

    def __init__(self, interval_s: float, clock=time.monotonic):
        self.interval_s, self.clock = interval_s, clock
        self._last_at, self._last_kind = None, None

    def ready(self, kind) -> bool:
        now = self.clock()
        if kind != self._last_kind or self._last_at is None or now - self._last_at >= self.interval_s:
            self._last_at, self._last_kind = now, kind
            return True
        return False


PROGRESS_INTERVAL_S = 0.1  # about 10 updates a second cross to the GUI, whatever the link speed


class DownloadWorker(QObject):
    sig_progress = Signal(object)  # runtime.api.DownloadProgress, throttled to about 10 Hz
    sig_finished = Signal(object, str)  # final DownloadProgress (or None), error message ("" when none)

    def __init__(self, repo: str, dest: Path, revision: str | None = None, stall_seconds: float = 30.0):
        super().__init__()
        self.repo, self.dest, self.revision, self.stall_seconds = repo, Path(dest), revision, stall_seconds
        self.job = None
        self.stopping = ""  # "paused" or "cancelled" when asked before the download began
        self.throttle = Throttle(PROGRESS_INTERVAL_S)
        self.reports = 0  # progress reports from the download, emitted or not

    def _report(self, progress) -> None:
        """The download's thread, once per chunk: only a few cross to the GUI thread."""
        self.reports += 1
        if self.throttle.ready(progress.state):
            self.sig_progress.emit(progress)

    @Slot()
    def run(self) -> None:
        try:
            if self.job is None:
                check_destination(self.dest, models_dir())
                remote = resolve(self.repo, self.revision, stop=lambda: bool(self.stopping))
                self.job = Download(remote, self.dest, self._report, stall_seconds=self.stall_seconds,
                                    token=hub_token())
                if self.stopping:  # asked while the hub was answering: the run returns at once
                    (self.job.cancel if self.stopping == "cancelled" else self.job.pause)()
            final = self.job.run()
            self.sig_finished.emit(final, "")
        except MetadataStopped:
            state = CANCELLED if self.stopping == "cancelled" else PAUSED
            stopped = DownloadProgress(state, 0, 0, 0.0, None, message=f"{state} before the download began")
            self.sig_finished.emit(stopped, "")
        except ElasticError as e:
            self.sig_finished.emit(self.job.progress if self.job else None, str(e))
        except Exception as e:
            log.exception("download of %s failed", self.repo)
            self.sig_finished.emit(self.job.progress if self.job else None, f"{type(e).__name__}: {e}")

    # thread-safe controls, called from the GUI thread
    def pause(self) -> None:
        self.stopping = self.stopping or "paused"  # reaches the hub's answer in flight, before there is a job
        if self.job is not None:
            self.job.pause()

    def cancel(self) -> None:
        self.stopping = "cancelled"
        if self.job is not None:
            self.job.cancel()


class TaskWorker(QObject):
    sig_done = Signal(object)
    sig_failed = Signal(str)

    def __init__(self, fn, *args):
        super().__init__()
        self.fn, self.args = fn, args

    @Slot()
    def run(self) -> None:
        try:
            self.sig_done.emit(self.fn(*self.args))
        except BaseException as e:  # a native panic too (verify and import read safetensors files)
            if not _caught(e):
                raise
            log.debug("task failed: %s", traceback.format_exc())
            self.sig_failed.emit(str(e) if isinstance(e, Exception) else _describe(e))


class _TaskHandle(QObject):
    """Lives in the GUI thread, so the worker's result arrives there (queued), then calls back."""

    def __init__(self, runner: "TaskRunner", worker: TaskWorker, thread: QThread, on_done, on_failed):
        super().__init__(runner)
        self.runner, self.worker, self.thread, self.on_done, self.on_failed = runner, worker, thread, on_done, on_failed

    @Slot(object)
    def done(self, value) -> None:
        on_done, _ = self._finish()
        if on_done is not None:  # None: the runner was shut down, its owner is going away
            on_done(value)

    @Slot(str)
    def failed(self, message: str) -> None:
        _, on_failed = self._finish()
        if on_failed is not None:
            on_failed(message)

    def _finish(self) -> tuple:
        """Ends the task; returns (on_done, on_failed). The handle lets go of them and of the runner
        before its deferred deletion: if they held the last reference to the runner's owner, freeing
        them inside this handle's destructor would delete the owner, and with it this handle, twice."""
        stop_thread(self.thread)
        self.runner.handles.discard(self)
        callbacks = self.on_done, self.on_failed
        self.on_done = self.on_failed = self.runner = None
        self.deleteLater()
        return callbacks


class TaskRunner(QObject):
    """Runs blocking functions one thread each and calls back on the GUI thread."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.handles: set[_TaskHandle] = set()

    def run(self, fn, args: tuple, on_done, on_failed) -> None:
        worker = TaskWorker(fn, *args)
        thread = start_in_thread(worker, getattr(fn, "__name__", "task"))
        handle = _TaskHandle(self, worker, thread, on_done, on_failed)
        self.handles.add(handle)
        worker.sig_done.connect(handle.done)
        worker.sig_failed.connect(handle.failed)
        QMetaObject.invokeMethod(worker, "run", Qt.ConnectionType.QueuedConnection)

    def shutdown(self) -> None:
        """Stops every task's thread; a result that arrives afterwards is dropped, never handed to an
        owner that is going away."""
        for handle in list(self.handles):
            handle.worker.blockSignals(True)
            stop_thread(handle.thread)
            handle.on_done = handle.on_failed = None
        self.handles.clear()
