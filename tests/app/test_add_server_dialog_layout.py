"""The Add server dialog keeps its intro, its fields and its notes whole once "List models" fills the
list: the models get a list of their own that scrolls, and the dialog is never shorter than its wrapped
texts need at its width (a fixed-height dialog with a combo box squeezed the intro; issue 38, item 7)."""

from app.widgets.remote_source import RemoteSourceDialog

IDS = [f"nvidia/NVIDIA-Nemotron-Labs-3-Elastic-30B-A3B-NVFP4{s}" for s in ("", ":30B", ":23B", ":12B")] + \
      [f"org/model-{i}" for i in range(20)]


class AnsweringModels:
    """The model manager's controller as the dialog sees it: a probe whose answer the test gives."""

    def __init__(self):
        self.answer = None

    def probe_server(self, url, key, listed, failed) -> None:
        self.answer = listed


def squeezed(dialog: RemoteSourceDialog) -> list[str]:
    """What is shown shorter than it needs at its width."""
    bad = [f"{name}: {label.height()} < {label.heightForWidth(label.width())}"
           for name, label in (("intro", dialog.intro), ("key note", dialog.key_note), ("message", dialog.message))
           if label.height() < label.heightForWidth(label.width())]
    bad += [f"{name}: {field.height()} < {field.minimumSizeHint().height()}"
            for name, field in (("address", dialog.url), ("key", dialog.key), ("List models", dialog.list_button))
            if field.height() < field.minimumSizeHint().height()]
    return bad


def test_listing_models_keeps_the_intro_and_fields_whole_and_the_list_scrolls(qtbot):
    models = AnsweringModels()
    dialog = RemoteSourceDialog(None, models)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert squeezed(dialog) == []
    dialog.url.setText("http://gpu-box:8000/v1")
    dialog.list_button.click()
    models.answer(IDS)
    qtbot.waitUntil(lambda: dialog.add_button.isEnabled() and squeezed(dialog) == [], timeout=60000)
    assert [dialog.model.item(i).text() for i in range(dialog.model.count())] == IDS
    assert dialog.model.verticalScrollBar().maximum() > 0  # 24 ids: the list scrolls, the rest stays
    assert dialog.model.height() >= 4 * dialog.model.fontMetrics().lineSpacing()
    assert dialog.model.item(1).toolTip() == IDS[1] and dialog.chosen() == IDS[0]
    dialog.resize(380, 200)  # narrower and shorter: the texts wrap to more lines and keep them
    qtbot.waitUntil(lambda: dialog.width() <= 400, timeout=60000)
    qtbot.waitUntil(lambda: squeezed(dialog) == [], timeout=60000)
    dialog.url.setText("http://other:8000/v1")
    dialog.url.textEdited.emit("http://other:8000/v1")  # another server: its models are not known yet
    assert dialog.model.count() == 0 and dialog.chosen() == "" and not dialog.add_button.isEnabled()
