"""The model manager's names stay readable at every font size (issue 38, a real-window session): at font
13-15 the other eight columns took the width and the Model column shrank to "N…)", "d…)", so the rows could
not be told apart before Use or Delete. The names now keep a share; the other columns give up width first."""

import pytest

from app.models_controller import ModelsController
from app.widgets.fitted_table import NAME_CHARS, NAME_SHARE, column_widths
from tests.app.test_names_elide_in_the_middle import painted
from tests.app_support import open_dialog
from tests.paths import PROBES


@pytest.mark.parametrize("wanted,available", [([100, 50, 50], 400), ([300, 50, 50], 400), ([10, 10], 20)])
def test_columns_that_fit_get_what_they_want_and_the_names_the_rest(wanted, available):
    widths = column_widths(wanted, available, keep=150, floor=30)
    assert widths[1:] == wanted[1:] and sum(widths) == available


@pytest.mark.parametrize("wanted,available,keep", [
    ([400, 120, 90, 200, 60], 500, 170),  # the others shrink to leave the names their share
    ([400, 120, 90, 200, 60], 900, 170),  # they all fit but the names: the names take what is left
    ([120, 300, 300], 400, 170),  # names that want less than the share keep what they want
    ([400] * 9, 600, 204),
])
def test_columns_that_do_not_fit_leave_the_names_their_share(wanted, available, keep):
    floor = 30
    widths = column_widths(wanted, available, keep, floor)
    assert widths[0] >= min(wanted[0], keep)  # the names' share
    assert all(floor <= w <= want or w == want for w, want in zip(widths[1:], wanted[1:]))
    if sum(min(w, floor) for w in wanted[1:]) + widths[0] <= available:
        assert sum(widths) <= available  # no sideways scrolling while the others can still give
    if sum(wanted) > available:
        assert widths[0] < wanted[0] or sum(widths) <= available


def test_the_widest_column_gives_first_and_short_ones_stay_whole():
    assert column_widths([300, 40, 60, 300, 70], 500, keep=170, floor=30) == [170, 40, 60, 160, 70]


def test_past_their_floors_the_table_scrolls_rather_than_squeeze():
    assert column_widths([300, 100, 100], 150, keep=100, floor=40) == [100, 40, 40]


@pytest.mark.parametrize("size", [11, 13, 15])
def test_every_name_in_the_model_manager_reads_at_any_font_size(qtbot, home, themed, size):
    themed("light", size)
    models = ModelsController(probe_file=str(PROBES / "rtx5090.json"))
    try:
        dialog = open_dialog(qtbot, models)
        table = dialog.table
        qtbot.waitUntil(lambda: table.columnWidth(0) > 0, timeout=60000)
        share = max(int(table.viewport().width() * NAME_SHARE), NAME_CHARS * table.fontMetrics().averageCharWidth())
        for i, r in enumerate(dialog.rows):
            text = painted(table, i, 0)
            assert text == r.title or len(text) >= min(len(r.title), NAME_CHARS - 4), (size, text)
        wanted = max(table.sizeHintForColumn(0), 1)
        assert table.columnWidth(0) >= min(wanted, share) - 1
        texts = [painted(table, i, 0) for i in range(len(dialog.rows))]
        assert len(set(texts)) == len(texts), texts  # each row tells itself apart
    finally:
        models.shutdown()
