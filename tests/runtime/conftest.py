"""Fixtures of the runtime tests."""

import pytest

from runtime.engine import Engine


@pytest.fixture(scope="module")
def engine(checkpoints):
    """An engine over the tiny random 'hybrid' checkpoint (real tokenizer and chat template), one per
    module; a module that needs another engine defines its own `engine`."""
    return Engine.load(checkpoints["hybrid"], max_context=512)
