"""The kernel tests run the Triton kernels on CPU tensors in Triton's interpreter: TRITON_INTERPRET
must be set before triton is imported (its @triton.jit reads it once, when a kernel is defined),
so it is set here, when pytest collects this folder, before any test imports the kernels."""

import os

import pytest

os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def fused():
    """The Triton backend, interpreted (skipped where triton is not installed: the `gpu`/`test` extras)."""
    pytest.importorskip("triton")
    from runtime.kernels import triton_fused

    assert triton_fused.interpreted(), ("triton's kernels were built before this conftest set TRITON_INTERPRET=1 "
                                        "(something imported runtime.kernels.triton_fused earlier): run the kernel "
                                        "tests in their own pytest process")
    return triton_fused
