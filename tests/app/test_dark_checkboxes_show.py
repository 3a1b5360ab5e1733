"""An unchecked checkbox shows in the dark theme: Fusion drew its edge a shade darker than the window, so in a
list (an MCP server's tools, "checked: runs without asking") and beside a label ("Show secret values") there was
nothing to see or to click (found in a real-window session). Measured on the widget's own pixels: the box's
edge stands out from what is around it, in both themes, and a checked box still shows its check mark."""

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QCheckBox, QListWidget, QListWidgetItem, QStyle, QStyleOptionButton

CONTRAST = 60  # the least difference in lightness (0-255) between the box's edge and the ground around it


def lightness_range(image, rect) -> tuple[int, int]:
    values = [QColor(image.pixel(QPoint(x, y))).lightness()
              for x in range(rect.left(), rect.right() + 1) for y in range(rect.top(), rect.bottom() + 1)]
    return min(values), max(values)


def ground(image, rect) -> int:
    """The lightness just left of the box (the widget's background)."""
    return QColor(image.pixel(QPoint(max(0, rect.left() - 2), rect.center().y()))).lightness()


def standing_out(image, rect) -> int:
    low, high = lightness_range(image, rect)
    g = ground(image, rect)
    return max(abs(high - g), abs(g - low))


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_an_unchecked_box_beside_a_label_shows(qtbot, themed, theme):
    themed(theme, 11)
    box = QCheckBox("Show secret values (tokens, keys)")
    qtbot.addWidget(box)
    box.resize(box.sizeHint())
    box.show()
    qtbot.waitExposed(box)
    option = QStyleOptionButton()
    box.initStyleOption(option)
    rect = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, option, box)
    image = box.grab().toImage()
    assert standing_out(image, rect) >= CONTRAST, (theme, lightness_range(image, rect), ground(image, rect))


@pytest.mark.parametrize("theme", ["dark", "light"])
@pytest.mark.parametrize("state", [Qt.CheckState.Unchecked, Qt.CheckState.Checked])
def test_a_box_in_a_list_shows(qtbot, themed, theme, state):
    themed(theme, 11)
    view = QListWidget()
    qtbot.addWidget(view)
    item = QListWidgetItem("calculate")
    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
    item.setCheckState(state)
    view.addItem(item)
    view.resize(240, 80)
    view.show()
    qtbot.waitExposed(view)
    row = view.visualItemRect(item)
    box = row.adjusted(0, 0, -(row.width() - row.height() - 4), 0)  # the square at the row's start: its box
    image = view.viewport().grab().toImage()
    low, high = lightness_range(image, box)
    assert high - low >= CONTRAST, (theme, state, low, high)  # an edge or a mark, never a blank
