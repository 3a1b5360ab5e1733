"""CUDA graphs for the decode step: capture once per key (a submodel's cache and a key span),
replay per token, fall back to eager with the reason kept for the engine status.

A decode step of the 30B shape is about a thousand small kernels; launched one by one from
Python the GPU waits on the CPU (launch-bound). A captured graph launches them all at once.
What makes the step capturable is decode_step.py's job (static shapes, fixed buffers, no host
sync); this module only captures, replays and says what happened.

    graphs = GraphSet(device)          # one per model: the memory pool and the on/off decision
    runner = graphs.runner()           # one per cache (its buffers are baked into its graphs)
    logits = runner.run(span, step)    # first call: eager, then capture; later calls: replay

Turn graphs off with ELASTIC_CHAT_CUDA_GRAPHS=0 (the status then says so).
"""

from __future__ import annotations

import logging
import os
from typing import Callable

import torch

log = logging.getLogger(__name__)
ENV = "ELASTIC_CHAT_CUDA_GRAPHS"
GRAPH = "CUDA graph"


class GraphSet:
    """Whether decode steps on `device` run as CUDA graphs, and the memory pool they share
    (their intermediates never live across steps, so one pool serves every submodel and span)."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.reason: str | None = None  # why graphs are not used; None while they are
        self.pool = None
        if self.device.type != "cuda":
            self.reason = f"no CUDA graphs on {self.device.type}"
        elif os.environ.get(ENV, "1").strip() in ("0", "false", "off", "no"):
            self.reason = f"turned off by {ENV}"

    @property
    def enabled(self) -> bool:
        return self.reason is None

    @property
    def status(self) -> str:
        """What the engine status shows: "CUDA graph" or "eager (why)"."""
        return GRAPH if self.enabled else f"eager ({self.reason})"

    def disable(self, reason: str) -> None:
        if self.reason is None:
            log.warning("CUDA graphs off, decoding eagerly: %s", reason)
            self.reason = reason

    def runner(self, eager: str | None = None) -> "GraphRunner":
        """A runner for one decode step; `eager` (why) makes it never capture, e.g. a step that leaves
        the device mid-way (routed experts in RAM, placement.py)."""
        return GraphRunner(self, eager)


class GraphRunner:
    """The captured graphs of one decode step (one per key), with their static outputs."""

    def __init__(self, graphs: GraphSet, eager: str | None = None):
        self.graphs = graphs
        self.eager = eager
        self.captured: dict[object, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}

    def run(self, key, step: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Runs `step` (a function of fixed buffers only) and returns its output.

        The first call for a key runs it eagerly on a side stream (a real step, whose result is
        used; it also warms up cuBLAS and the matmul self-tests outside capture), then captures it.
        Later calls replay the graph. A failed capture turns graphs off for the whole set.
        """
        if not self.graphs.enabled or self.eager is not None:
            return step()
        hit = self.captured.get(key)
        if hit is not None:
            graph, out = hit
            graph.replay()
            return out
        out = self._warm_up(step)
        try:
            self.captured[key] = self._capture(step)
        except Exception as e:  # an op that cannot be captured: say which, decode eagerly from now on
            if torch.cuda.is_available():
                torch.cuda.synchronize(self.graphs.device)
            self.graphs.disable(f"capture failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        return out

    def _warm_up(self, step):
        side = torch.cuda.Stream(self.graphs.device)
        side.wait_stream(torch.cuda.current_stream(self.graphs.device))
        with torch.cuda.stream(side):
            out = step()
        main = torch.cuda.current_stream(self.graphs.device)
        main.wait_stream(side)
        out.record_stream(main)  # made on the side stream, read on this one
        return out

    def _capture(self, step):
        if self.graphs.pool is None:
            self.graphs.pool = torch.cuda.graph_pool_handle()
        torch.cuda.synchronize(self.graphs.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.graphs.pool):
            out = step()
        return graph, out
