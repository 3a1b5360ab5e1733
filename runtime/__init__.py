"""Elastic Chat's inference engine: plain PyTorch, no Qt.

Start with `model.py` (an elastic checkpoint in memory and its forward pass); the mixers
live in `mamba.py`, `attention.py` and `moe.py`; `weights.py` explains how every submodel
is a view into one resident copy; `cli.py` is the command line (`python -m runtime`).
"""

from .errors import CheckpointError, ElasticError, UsageError
from .model import ElasticModel

__all__ = ["ElasticModel", "ElasticError", "CheckpointError", "UsageError"]
