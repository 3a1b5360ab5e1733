"""Draws the app icon (three nested rounded squares: one model holding two smaller ones) and
writes assets/icon.png (256 px) and assets/icon.ico (Windows shortcuts). Run once; the files are
committed.

    QT_QPA_PLATFORM=offscreen python installer/make_icon.py
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage, QPainter, QPen

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def draw(size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    s = size / 256
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor("#1f2125"))
    p.drawRoundedRect(QRectF(8 * s, 8 * s, 240 * s, 240 * s), 48 * s, 48 * s)
    for inset, color in ((36, "#76b900"), (70, "#a3d65c"), (100, "#e8f5d0")):
        p.setPen(QPen(QColor(color), 12 * s))
        p.setBrush(Qt.BrushStyle.NoBrush)
        r = QRectF(inset * s, inset * s, (256 - 2 * inset) * s, (256 - 2 * inset) * s)
        p.drawRoundedRect(r, 18 * s, 18 * s)
    p.end()
    return image


if __name__ == "__main__":
    app = QGuiApplication(sys.argv[:1])
    draw(256).save(str(ASSETS / "icon.png"))
    draw(64).save(str(ASSETS / "icon.ico"))
    print("wrote", ASSETS / "icon.png", ASSETS / "icon.ico")
