"""One convention for byte counts (runtime/units.py): the load's progress line says sizes as the model
manager and the planner do, in binary units."""

import pytest

from runtime.checkpoint.reader import LoadProgress
from runtime.units import GiB, KiB, MiB, format_bytes, format_part, unit_for


@pytest.mark.parametrize("total", [5 * MiB, 900 * MiB, GiB, 18_000_000_000, 63_160_000_000, 300 * KiB])
def test_the_load_line_says_the_size_the_model_manager_says(total):
    read = total // 5
    line = LoadProgress(read, total, 10, 50, "model-00001-of-00005.safetensors", 1, 5, 2.0, 8.0).line()
    assert f" of {format_bytes(total)} (20%)" in line  # what the model manager shows for the same folder
    assert line.startswith(f"loading {format_part(read, total)} ")


def test_a_part_is_in_the_units_of_its_whole():
    assert format_part(3_200_000_000, 18_000_000_000) == "3.0 of 16.8 GiB"
    assert format_part(512 * KiB, 3 * MiB) == "0.5 of 3.0 MiB"
    assert [unit_for(n) for n in (1, KiB, MiB - 1, MiB, GiB)] == ["KiB", "KiB", "KiB", "MiB", "GiB"]


@pytest.mark.parametrize("n,noun,plural,said", [
    (0, "reply", "replies", "0 replies"), (1, "reply", "replies", "1 reply"), (2, "reply", "replies", "2 replies"),
    (1, "model", "", "1 model"), (11, "model", "", "11 models"), (1, "token", "", "1 token"),
    (21, "token", "", "21 tokens")])
def test_a_count_takes_its_noun_in_the_right_number(n, noun, plural, said):
    from runtime.units import counted

    assert counted(n, noun, plural) == said


def test_one_byte_is_a_byte():
    assert [format_bytes(n) for n in (0, 1, 2, 820)] == ["0 bytes", "1 byte", "2 bytes", "820 bytes"]
