"""The model picker names the loaded model whatever the list holds: a model on a server (no row of its own
while the server is unreachable), a folder whose row went (deleted, moved) while loaded. A refresh of the
model list, as the model manager sends when a server stops answering, made the picker read "No model
loaded" while the model still answered (found in a 60-minute real-window session)."""

from types import SimpleNamespace

import pytest

from app.widgets.model_picker import ModelPicker


def row(title: str, key: str) -> SimpleNamespace:
    return SimpleNamespace(title=title, key=key, folder=f"/models/{key}", on_disk=True)


ROWS = [row("demo", "demo"), row("demo (NVFP4)", "demo-nvfp4")]


@pytest.mark.parametrize("folder, name", [
    ("remote+http://127.0.0.1:9/v1#demo", "demo on 127.0.0.1:9"),  # a server's model: never a row of the picker
    ("/models/gone", "gone"),  # a folder whose row went (deleted or moved while loaded)
])
@pytest.mark.parametrize("rows_after", [ROWS, ROWS[:1], []])
def test_a_refreshed_list_keeps_the_loaded_models_name(qtbot, folder, name, rows_after):
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.set_models(ROWS)
    picker.set_loaded(folder, name, ("1.5M",), ("1.5M",))
    assert picker.combo.currentText() == name
    picker.set_models(rows_after)  # the model manager's next list: the loaded one is not in it
    assert picker.combo.currentText() == name and picker.unload.isEnabled()
    assert [picker.combo.itemText(i) for i in range(1, picker.combo.count())] == [r.title for r in rows_after]
    picker.set_loaded("", "", (), ())  # unloaded: the list says so at the next refresh too
    picker.set_models(rows_after)
    assert picker.combo.currentText() == "No model loaded" and not picker.unload.isEnabled()


def test_a_loaded_model_with_a_row_is_that_row(qtbot):
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.set_models(ROWS)
    picker.set_loaded("/models/demo-nvfp4", "demo (NVFP4)", ("1.5M",), ("1.5M",))
    picker.set_models(ROWS)
    assert picker.combo.currentData() == "demo-nvfp4" and picker.combo.count() == len(ROWS)
