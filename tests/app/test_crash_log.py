"""An abort leaves its reason in the log (issue 37, item 3): the app once aborted under load with
nothing on stderr. faulthandler writes a native crash's trace to the log; a qFatal's reason and
Python's own fatal errors (which switch faulthandler off before they abort) reached stderr alone."""

import subprocess
import sys

import pytest

from tests.paths import ROOT

DEATHS = {
    "abort": ("import os; os.abort()", "Fatal Python error: Aborted"),
    "segfault": ("import faulthandler; faulthandler._sigsegv()", "Fatal Python error: Segmentation fault"),
    "qFatal": ("from PySide6.QtCore import qFatal; qFatal('the platform plugin is gone')",
               "the platform plugin is gone"),
    "Python fatal error": ("import ctypes; ctypes.pythonapi.Py_FatalError(b'none_dealloc: deallocating None')",
                           "none_dealloc: deallocating None"),
    "qCritical, then abort": ("from PySide6.QtCore import qCritical; qCritical('a widget was deleted twice');"
                              " import os; os.abort()", "a widget was deleted twice"),
}


@pytest.mark.parametrize("stderr", ["nowhere", "a pipe"])
@pytest.mark.parametrize("death", DEATHS)
def test_an_abort_leaves_its_reason_in_the_log(tmp_path, death, stderr):
    log = tmp_path / "elastic-chat.log"
    code, reason = DEATHS[death]
    script = (f"import sys, logging; sys.path.insert(0, {str(ROOT)!r})\n"
              "from pathlib import Path\n"
              "from app import crash\n"
              "from runtime.private_files import open_append\n"
              f"to_log = logging.StreamHandler(open_append(Path({str(log)!r})))\n"
              "logging.basicConfig(level=logging.INFO, handlers=[to_log])\n"
              f"crash.install(Path({str(log)!r}))\n"
              f"{code}\n")
    where = subprocess.DEVNULL if stderr == "nowhere" else subprocess.PIPE
    proc = subprocess.run([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=where, timeout=120)
    assert proc.returncode != 0
    logged = log.read_text(errors="replace")
    if stderr == "a pipe" and death == "Python fatal error":
        # the one reason a pipe keeps alone: Python writes it to stderr only (someone reads a pipe) and
        # switches faulthandler off first, so not even "Aborted" reaches the log
        assert reason in proc.stderr.decode(errors="replace") and "Aborted" not in logged
    else:
        assert reason in logged
