"""Settings: the sampling rows (temperature, top-p, …) share the label column of the rows above them,
on the Defaults tab and on This chat, so every field starts at the same x (issue 38, item 7)."""

from app.state.settings import Settings
from app.widgets.settings_dialog import SettingsDialog


def left_x(widget, dialog) -> int:
    return widget.mapTo(dialog, widget.rect().topLeft()).x()


def test_the_sampling_fields_line_up_with_the_fields_above(qtbot):
    dialog = SettingsDialog(None, Settings(), "", {})
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    above = {left_x(w, dialog) for w in (dialog.theme, dialog.font_size, dialog.max_tokens, dialog.context)}
    sampling = {name: left_x(box, dialog) for name, box in dialog.default_sampling.fields.items()}
    assert len(above) == 1 and set(sampling.values()) == above, (above, sampling)
    dialog.tabs.setCurrentIndex(1)
    qtbot.waitUntil(dialog.chat_prompt.isVisible, timeout=60000)
    prompt = left_x(dialog.chat_prompt, dialog)
    chat = {name: left_x(box, dialog) for name, box in dialog.chat_sampling.fields.items()}
    assert set(chat.values()) == {prompt}, (prompt, chat)
    assert {"temperature", "top_p"} <= set(sampling) and dialog.default_sampling.values()["top_p"] > 0
