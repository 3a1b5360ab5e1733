"""The Settings dialog fits the screen it opens on at every font size, so OK and Cancel can be clicked.
At font size 15 it opened 1054x809 on a 1280x720 screen, its buttons below the screen's edge (found in a
real-window session); its pages now scroll instead, and a dialog that fits keeps the size it asks for."""

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from app.state.settings import FONT_SIZE, Settings
from app.widgets.screen_fit import FRAME_GUESS, Page
from app.widgets.settings_dialog import SettingsDialog


def global_rect(widget) -> QRect:
    return QRect(widget.mapToGlobal(widget.rect().topLeft()), widget.size())


@pytest.mark.parametrize("font_size", [FONT_SIZE.default, 15, 20, FONT_SIZE.high])
@pytest.mark.parametrize("with_tools", [False, True])
def test_settings_fit_the_screen_and_its_buttons_are_on_it(qtbot, tmp_path, themed, font_size, with_tools):
    themed("light", font_size)
    tools = None
    if with_tools:  # the MCP servers tab is the tallest at a large font
        from app.tools_controller import ToolsController

        tools = ToolsController(tmp_path)
    dialog = SettingsDialog(None, Settings(font_size=font_size), "", {}, tools=tools)
    qtbot.addWidget(dialog)
    try:
        dialog.show()
        qtbot.waitExposed(dialog)
        QApplication.processEvents()
        free = dialog.screen().availableGeometry()
        room = free.size() - FRAME_GUESS
        assert dialog.width() <= room.width() and dialog.height() <= room.height(), (dialog.size(), free)
        assert dialog.size() == dialog.sizeHint().boundedTo(room)  # as large as it asks, up to the screen
        buttons = dialog.findChild(QDialogButtonBox)
        for button in buttons.buttons():
            assert button.isVisible() and free.contains(global_rect(button)), (button.text(), global_rect(button))
        for i in range(dialog.tabs.count()):  # every page scrolls rather than growing the dialog
            assert isinstance(dialog.tabs.widget(i), Page)
    finally:
        dialog.close()
        if tools is not None:
            tools.shutdown()


def test_a_page_that_fits_asks_for_its_whole_size(qtbot, themed):
    """A Page's hint is its page's, not QScrollArea's 36x24-line cap: at the default font on a large
    screen the dialog looks as it did before pages scrolled."""
    themed("light", FONT_SIZE.default)
    dialog = SettingsDialog(None, Settings(), "", {})
    qtbot.addWidget(dialog)
    for i in range(dialog.tabs.count()):
        page = dialog.tabs.widget(i)
        assert page.sizeHint() == page.page.sizeHint().expandedTo(page.page.minimumSizeHint())


@pytest.mark.parametrize("height", [560, 640, 695])
def test_a_page_shrinks_to_its_smallest_before_it_scrolls(qtbot, tmp_path, themed, height):
    """The MCP servers page (wrapped text, lists that may shrink) scrolled at the default font in a
    695 px tall dialog, since a scroll area asks a page with wrapped text for its preferred height; it
    scrolls only when the dialog is smaller than the page's smallest height."""
    from app.tools_controller import ToolsController

    themed("light", FONT_SIZE.default)
    tools = ToolsController(tmp_path)
    dialog = SettingsDialog(None, Settings(), "", {}, tools=tools)
    qtbot.addWidget(dialog)
    try:
        dialog.show()
        dialog.resize(810, height)
        dialog.tabs.setCurrentIndex(dialog.mcp_tab)
        page = dialog.tabs.widget(dialog.mcp_tab)
        qtbot.waitUntil(lambda: page.viewport().height() > 0 and page.page.isVisible(), timeout=5000)
        QApplication.processEvents()
        smallest = page.page.layout().totalMinimumHeightForWidth(page.viewport().width())  # the page's own rule
        assert smallest < page.page.sizeHint().height()  # (the lists can shrink)
        scrolls = page.verticalScrollBar().maximum() > 0
        assert scrolls == (smallest > page.viewport().height()), (smallest, page.viewport().height())
    finally:
        dialog.close()
        tools.shutdown()

