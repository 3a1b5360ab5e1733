"""A spin box for one option of runtime/options.py: its range, step, special value and help come from
the option, so the dialog offers exactly what the settings file, the CLI and the server accept."""

from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

INT_MAX = 2**31 - 1  # a QSpinBox holds a C int


def option_box(option, value) -> QSpinBox | QDoubleSpinBox:
    """A QSpinBox (whole numbers) or QDoubleSpinBox showing `value`. An open bound (top-p above 0)
    becomes the nearest value the box can show inside it."""
    if option.kind is int:
        box = QSpinBox()
        box.setRange(int(option.low), int(min(option.high, INT_MAX)))
        if option.special:
            box.setSpecialValueText(option.special)
        box.setValue(int(value))
    else:
        box = QDoubleSpinBox()
        step = option.step or 0.01
        decimals = max(0, len(f"{step:g}".partition(".")[2]))
        unit = 10 ** -decimals
        box.setDecimals(decimals)
        box.setRange(option.low + unit if option.low_open else option.low,
                     option.high - unit if option.high_open else option.high)
        box.setSingleStep(step)
        box.setValue(float(value))
    box.setToolTip(option.help[:1].upper() + option.help[1:] + ".")
    return box
