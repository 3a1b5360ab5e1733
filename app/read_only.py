"""A write to a read-only history (a newer version's, an unwritable file, a full disk) as the banner's one
line, never the crash dialog."""

from __future__ import annotations

import functools

from .state.history import HistoryReadOnly


def refuses_read_only(method):
    """Wraps a method of a part of the chat controller (it has `front`, app/controller.py): when the
    history refuses the write, the front's `sig_error` says why and the method returns False; nothing
    else changes."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except HistoryReadOnly as e:
            self.front.sig_error.emit(str(e), "")
            return False
    return guarded
