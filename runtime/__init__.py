"""Elastic Chat's inference engine: plain PyTorch, no Qt.

Start with `model.py` (an elastic checkpoint in memory and its forward pass); the mixers
live in `mamba.py`, `attention.py` and `moe.py`; a reply is `generate.py` (`stream_chat`, the
decode loop) over `engine.py`; `checkpoint/` reads the files (`checkpoint/weights.py` explains
how every submodel is a view into one resident copy); `store/` manages models on this PC and
`server/` serves the engine over HTTP; `cli.py` is the command line (`python -m runtime`).
"""

import os

# PyTorch's CPU threads are OpenMP's, and OpenMP threads spin at every barrier unless told to sleep:
# beside one other busy process, two spinning threads ran about 10x slower than one on a 2-core PC.
# libgomp reads this once, when `import torch` loads it, so it is set here, before anything of the
# engine imports torch; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .errors import CheckpointError, ElasticError, UsageError
from .model import ElasticModel

__all__ = ["ElasticModel", "ElasticError", "CheckpointError", "UsageError"]
