"""Model names of one family share a long start and differ at the end ("… 30B-A3B (NVFP4)", "… (FP8)"):
the model picker and the model manager's catalog elide them in the middle, so the ends that tell them
apart stay visible, and give each whole name as its tooltip (issue 38, item 7)."""

from types import SimpleNamespace

from PySide6.QtCore import QModelIndex
from PySide6.QtWidgets import QStyleOptionViewItem

from app.models_controller import ModelsController
from app.widgets.model_picker import ModelPicker
from tests.app_support import open_dialog
from tests.paths import PROBES

PREFIX = "NVIDIA Nemotron Labs 3 Elastic 30B-A3B Reasoning"


def row(title: str, key: str) -> SimpleNamespace:
    return SimpleNamespace(title=title, key=key, folder=f"/models/{key}", on_disk=True)


def test_the_model_picker_shows_where_two_names_differ_and_tooltips_the_whole_name(qtbot):
    picker = ModelPicker()
    qtbot.addWidget(picker)
    names = [f"{PREFIX} (NVFP4)", f"{PREFIX} (FP8)"]
    picker.set_models([row(names[0], "a"), row(names[1], "b")])
    picker.resize(220, picker.sizeHint().height())
    picker.show()
    qtbot.waitExposed(picker)
    shown = []
    for i, name in enumerate(names):
        picker.combo.setCurrentIndex(picker.combo.findData("ab"[i]))
        text = picker.combo.shown_text()
        assert text != name and "…" in text  # squeezed (the test is about a narrow column)
        assert text.endswith(name[-6:]) and text.startswith("NVIDIA")  # both ends kept
        assert picker.combo.toolTip().startswith(name)
        assert picker.combo.itemData(picker.combo.currentIndex(), 3) == name  # the list's tooltip (ToolTipRole)
        shown.append(text)
    assert shown[0] != shown[1]


def painted(table, r: int, c: int) -> str:
    """The text the table's delegate paints in cell (r, c), elided the way the view tells it to."""
    option = QStyleOptionViewItem()
    option.initFrom(table)
    index = table.model().index(r, c, QModelIndex())
    table.itemDelegate().initStyleOption(option, index)
    width = table.columnWidth(c) - 12  # the cell's margins and the focus frame
    return table.fontMetrics().elidedText(option.text, table.textElideMode(), width)


def test_the_catalog_names_in_the_model_manager_keep_their_ends(qtbot, home, themed):
    themed("light", 16)  # names too long for their column at the dialog's width: they elide
    models = ModelsController(probe_file=str(PROBES / "rtx5090.json"))
    try:
        dialog = open_dialog(qtbot, models)
        dialog.resize(600, 480)
        qtbot.waitUntil(lambda: dialog.table.columnWidth(0) < dialog.table.sizeHintForColumn(0) - 24, timeout=60000)
        family = [i for i, r in enumerate(dialog.rows) if r.title.startswith("NVIDIA Nemotron")]
        assert len(family) >= 2
        texts = [painted(dialog.table, i, 0) for i in family]
        assert len(set(texts)) == len(texts), texts  # each one tells itself apart
        for i, text in zip(family, texts):
            title = dialog.rows[i].title
            head, _, tail = text.partition("…")  # elided in the middle: a start and an end of the title
            assert title.startswith(head) and title.endswith(tail) and len(head) >= 3 and len(tail) >= 3, text
            assert dialog.table.item(i, 0).toolTip().startswith(title)
    finally:
        models.shutdown()
