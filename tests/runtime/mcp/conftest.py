"""Fixtures of the MCP tests: the calc server (tests/runtime/mcp/calc_server.py, written with the SDK)
over stdio and over Streamable HTTP on 127.0.0.1, and a manager that approves what a test says."""

import socket
import subprocess
import sys
import time

import pytest

from runtime.mcp.client import McpManager
from runtime.mcp.config import ServerConfig
from tests.paths import ROOT

CALC = ROOT / "tests" / "runtime" / "mcp" / "calc_server.py"


@pytest.fixture
def calc_stdio():
    return ServerConfig("calc", command=sys.executable, args=(str(CALC),))


@pytest.fixture
def manager():
    """A manager that approves every server (the approval itself is tested on its own); closed after."""
    m = McpManager(is_approved=lambda server: True, call_timeout_s=5, start_timeout_s=20)
    yield m
    m.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def calc_http():
    """The calc server over Streamable HTTP on 127.0.0.1 (a process of its own), for one module."""
    port = _free_port()
    process = subprocess.Popen([sys.executable, str(CALC), "--http", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if process.poll() is not None:
                    pytest.fail("the calc HTTP server exited at start")
                time.sleep(0.1)
        yield ServerConfig("calc-http", url=f"http://127.0.0.1:{port}/mcp")
    finally:
        process.terminate()
        process.wait(10)
