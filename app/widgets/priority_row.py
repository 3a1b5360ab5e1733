"""A row layout that shares out width by priority: in the order of priority, widgets are shown while
their minimums fit (from the first that does not, the rest are dropped: they get no room at all),
then each shown one grows to its size hint in the same order; whatever is left goes to the stretchy
ones.

QHBoxLayout takes a shortage equally from everyone, so a graph shrinks to a stub while a long
status text keeps its room, and a row of texts squeezed together shows "R… S… C…". Here the short
live numbers keep theirs, the long texts shorten to readable forms (app/widgets/elided_label.py),
and what does not fit even so goes, least important first. The row asks only for room for its
first widget, so it never sets the window's minimum width."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QWidgetItem


class PriorityRow(QLayout):
    def __init__(self, parent=None, spacing: int = 8):
        super().__init__(parent)
        self._items: list[tuple[QWidgetItem, int, int]] = []  # item, priority (0 first), stretch
        self._spacing = spacing
        self.dropped: list = []  # the widgets the last layout had no room for

    def add(self, widget, priority: int, stretch: int = 0) -> None:
        self.addChildWidget(widget)
        self._items.append((QWidgetItem(widget), priority, stretch))
        self.invalidate()

    # QLayout's protocol
    def addItem(self, item) -> None:
        self._items.append((item, len(self._items), 0))

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, i: int):
        return self._items[i][0] if 0 <= i < len(self._items) else None

    def takeAt(self, i: int):
        return self._items.pop(i)[0] if 0 <= i < len(self._items) else None

    def _visible(self):
        return [(item, prio, stretch) for item, prio, stretch in self._items if not item.isEmpty()]

    def _total(self, sizes) -> QSize:
        m = self.contentsMargins()
        width = sum(s.width() for s in sizes) + self._spacing * max(0, len(sizes) - 1)
        height = max((s.height() for s in sizes), default=0)
        return QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def sizeHint(self) -> QSize:
        return self._total([item.sizeHint() for item, _, _ in self._visible()])

    def minimumSize(self) -> QSize:
        """The first widget's minimum width (the rest may be dropped); the tallest one's height."""
        visible = sorted(self._visible(), key=lambda v: v[1])
        size = self._total([visible[0][0].minimumSize()] if visible else [])
        height = max((max(item.minimumSize().height(), item.sizeHint().height()) for item, _, _ in visible),
                     default=0)
        m = self.contentsMargins()
        return QSize(size.width(), height + m.top() + m.bottom())

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation.Horizontal

    def _shown(self, visible, room: int) -> list[int]:
        """The indices of `visible` shown: in the order of priority, as many as fit at their minimum. The
        first that does not fit ends it, so a less important text never shows where a more important
        one was dropped."""
        shown, used = [], 0
        for i in sorted(range(len(visible)), key=lambda i: visible[i][1]):
            used += visible[i][0].minimumSize().width() + (self._spacing if shown else 0)
            if used > room:
                break
            shown.append(i)
        return sorted(shown)

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        area = self.contentsRect()
        visible = self._visible()
        shown = self._shown(visible, area.width())
        self.dropped = [visible[i][0].widget() for i in range(len(visible)) if i not in shown]
        for widget in self.dropped:  # no room: nothing of it is painted (not a letter and "…")
            widget.setGeometry(QRect(area.x(), area.y(), 0, 0))
        widths = {i: visible[i][0].minimumSize().width() for i in shown}
        left = area.width() - sum(widths.values()) - self._spacing * max(0, len(shown) - 1)
        for i in sorted(shown, key=lambda i: visible[i][1]):
            grow = max(0, min(left, visible[i][0].sizeHint().width() - widths[i]))
            widths[i] += grow
            left -= grow
        stretch = sum(visible[i][2] for i in shown)
        if left > 0 and stretch:
            for i in shown:
                widths[i] += left * visible[i][2] // stretch
        x = area.x()
        for i in shown:
            item = visible[i][0]
            h = min(area.height(), max(item.minimumSize().height(), item.sizeHint().height()))
            item.setGeometry(QRect(x, area.y() + (area.height() - h) // 2, widths[i], h))
            x += widths[i] + self._spacing
