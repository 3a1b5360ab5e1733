"""A row layout that shares out width by priority: every widget gets its minimum, then, in the
order of priority, each grows to its size hint; whatever is left goes to the stretchy ones.

QHBoxLayout takes a shortage equally from everyone, so a graph shrinks to a stub while a long
status text keeps its room. Here the short live numbers keep theirs and the long texts elide."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QWidgetItem


class PriorityRow(QLayout):
    def __init__(self, parent=None, spacing: int = 8):
        super().__init__(parent)
        self._items: list[tuple[QWidgetItem, int, int]] = []  # item, priority (0 first), stretch
        self._spacing = spacing

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
        visible = self._visible()
        width = sum(s.width() for s in sizes) + self._spacing * max(0, len(visible) - 1)
        height = max((s.height() for s in sizes), default=0)
        return QSize(width + m.left() + m.right(), height + m.top() + m.bottom())

    def sizeHint(self) -> QSize:
        return self._total([item.sizeHint() for item, _, _ in self._visible()])

    def minimumSize(self) -> QSize:
        return self._total([item.minimumSize() for item, _, _ in self._visible()])

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation.Horizontal

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        area = self.contentsRect()
        visible = self._visible()
        widths = [item.minimumSize().width() for item, _, _ in visible]
        left = area.width() - sum(widths) - self._spacing * max(0, len(visible) - 1)
        for i in sorted(range(len(visible)), key=lambda i: visible[i][1]):
            grow = max(0, min(left, visible[i][0].sizeHint().width() - widths[i]))
            widths[i] += grow
            left -= grow
        stretch = sum(s for _, _, s in visible)
        if left > 0 and stretch:
            for i, (_, _, s) in enumerate(visible):
                widths[i] += left * s // stretch
        x = area.x()
        for (item, _, _), w in zip(visible, widths):
            h = min(area.height(), max(item.minimumSize().height(), item.sizeHint().height()))
            item.setGeometry(QRect(x, area.y() + (area.height() - h) // 2, w, h))
            x += w + self._spacing
