"""A table whose first column (the names) keeps a readable share of the width.

Qt's ResizeToContents columns take what their contents want and a Stretch column gets what is left: at
font 13-15 the model manager's other eight columns took it all and the names shrank to "N…)", "d…)", so the
rows could not be told apart before Use or Delete. Here every column gets what it wants when all fit; when
they do not, the names keep at least a share and the widest other columns give up width first, down to a
floor; below that the table scrolls sideways rather than squeezing further.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHeaderView, QTableWidget

NAME_SHARE = 0.34  # of the width, the least the names keep when the columns do not all fit
NAME_CHARS = 22  # ... or this many average characters, whichever is more
FLOOR_CHARS = 5  # a column narrower than this many characters says nothing


def column_widths(wanted: list[int], available: int, keep: int, floor: int) -> list[int]:
    """Widths for columns wanting `wanted` pixels in `available`. When all fit, each gets what it wants
    and the first takes the rest. Else the first keeps `keep` (or what it wants, if less) and the widest of
    the others give up width first: they are all cut to one cap, the largest that fits (a short column, a
    verdict or a size, stays whole while a long path elides), never below `floor`."""
    if not wanted:
        return []
    first, others = wanted[0], wanted[1:]
    if sum(wanted) <= available:
        return [available - sum(others), *others]
    first = min(first, max(keep, available - sum(others)))
    cap = max(widest_cap(others, max(available - first, 0)), floor)
    return [first, *(min(w, cap) for w in others)]


def widest_cap(widths: list[int], room: int) -> int:
    """The largest cap c at which the widths, each cut to c, fit in `room` (0 when none does)."""
    low, high = 0, max(widths)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(min(w, mid) for w in widths) <= room:
            low = mid
        else:
            high = mid - 1
    return low


class FittedTable(QTableWidget):
    """A QTableWidget that lays its columns out with `column_widths` at every resize and refill."""

    def __init__(self, rows: int, columns: int):
        super().__init__(rows, columns)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)

    def fit_columns(self) -> None:
        header = self.horizontalHeader()
        wanted = [max(self.sizeHintForColumn(c), header.sectionSizeFromContents(c).width())
                  for c in range(self.columnCount())]
        available = self.viewport().width()
        char = self.fontMetrics().averageCharWidth()
        keep = max(int(available * NAME_SHARE), NAME_CHARS * char)
        for c, width in enumerate(column_widths(wanted, available, keep, FLOOR_CHARS * char)):
            header.resizeSection(c, width)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit_columns()
