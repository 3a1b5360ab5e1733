"""Light, dark and system themes, and the font size, applied to the whole application."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

NVIDIA_GREEN = "#76b900"

STYLE = """
#userMessage { background: palette(alternate-base); border-radius: 10px; }
#assistantMessage { border: 1px solid palette(mid); border-radius: 10px; }
#thinking { background: palette(base); border-left: 3px solid %(accent)s; border-radius: 4px; }
#thinkingText { color: palette(placeholder-text); background: transparent; }
#toolRoundThinking { color: palette(placeholder-text); font-style: italic; border-left: 3px solid %(accent)s;
                     padding-left: 6px; }
#thinkingToggle { border: none; font-style: italic; }
#codeBlock { background: palette(base); border: 1px solid palette(mid); border-radius: 6px; }
#role { font-weight: bold; }
#messageInfo, #stat, #depthDetail { color: palette(placeholder-text); }
#sectionTitle { font-weight: bold; }
#banner { background: %(banner)s; border-radius: 6px; padding: 6px; }
#errorBanner { background: #b91c1c; color: white; border-radius: 6px; padding: 6px; }
QPushButton#smallButton { padding: 1px 8px; }
#contextLabel { color: palette(placeholder-text); }
#contextLabel[over="refuse"] { color: #d97706; font-weight: bold; }
#contextBar[over="refuse"] { border: 1px solid palette(mid); border-radius: 3px; background: palette(base); }
#contextBar[over="refuse"]::chunk { background: #d97706; border-radius: 2px; }
#liveStrip { border-top: 1px solid palette(mid); border-bottom: 1px solid palette(mid); }
"""


# Fusion draws an unchecked box's edge a shade darker than the window: on the dark palette it did not show at all,
# in a list (an MCP server's tools: "checked: runs without asking") or beside a label ("Show secret values").
# Only the unchecked state is styled: a checked box keeps Fusion's own check mark.
DARK_STYLE = """
QCheckBox::indicator:unchecked, QAbstractItemView::indicator:unchecked {
    border: 1px solid #8a9099; border-radius: 2px; background: #17181b; width: 12px; height: 12px; }
"""


def dark_palette() -> QPalette:
    p = QPalette()
    colors = {
        QPalette.ColorRole.Window: "#1f2125", QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#17181b", QPalette.ColorRole.AlternateBase: "#2a2d33",
        QPalette.ColorRole.Text: "#e6e6e6", QPalette.ColorRole.Button: "#2a2d33",
        QPalette.ColorRole.ButtonText: "#e6e6e6", QPalette.ColorRole.Highlight: NVIDIA_GREEN,
        QPalette.ColorRole.HighlightedText: "#000000", QPalette.ColorRole.ToolTipBase: "#2a2d33",
        QPalette.ColorRole.ToolTipText: "#e6e6e6", QPalette.ColorRole.PlaceholderText: "#9aa0a6",
        QPalette.ColorRole.Mid: "#3c4048", QPalette.ColorRole.Link: "#8ab4f8",
    }
    for role, color in colors.items():
        p.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6b7079"))
    return p


def light_palette() -> QPalette:
    p = QApplication.style().standardPalette()
    p.setColor(QPalette.ColorRole.Highlight, QColor(NVIDIA_GREEN))
    p.setColor(QPalette.ColorRole.AlternateBase, QColor("#eef3e6"))
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor("#6b7079"))
    return p


def is_dark(theme: str) -> bool:
    if theme == "dark":
        return True
    if theme == "light":
        return False
    hints = QGuiApplication.styleHints()
    return hasattr(hints, "colorScheme") and hints.colorScheme() == Qt.ColorScheme.Dark


def apply_theme(app: QApplication, theme: str, font_size: int) -> None:
    app.setStyle("Fusion")
    dark = is_dark(theme)
    app.setPalette(dark_palette() if dark else light_palette())
    font = QFont(app.font())
    font.setPointSize(max(7, min(28, font_size)))
    app.setFont(font)
    app.setStyleSheet(STYLE % {"accent": NVIDIA_GREEN, "banner": "#2f3a1f" if dark else "#e8f5d0"}
                      + (DARK_STYLE if dark else ""))
