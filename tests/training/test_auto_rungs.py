"""training.auto_rungs end to end on the bundled demo: a second set of calibration sums (issue 40)."""

import json

import pytest

from tests.paths import DEMO
from training.auto_rungs import main


@pytest.mark.slow
def test_auto_rungs_runs_its_policies_on_the_calibration_sums_of_the_seed_asked(tmp_path, capsys):
    out = tmp_path / "rungs.json"
    main(["--checkpoint", str(DEMO), "--n", "2", "--seed", "2", "--policies", "small>parent@0.45", "Max",
          "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["seed"] == 2 and result["sums"] == 2
    assert [r["policy"] for r in result["rows"]] == ["small>parent@0.45", "Max"]
    for row in result["rows"]:
        assert 0 <= row["accuracy"] <= 1 and row["mean_cpu_ms"] > 0
    assert result["rows"][0]["climbed"] is not None and result["rows"][1]["climbed"] is None
    assert "small>parent@0.45: " in capsys.readouterr().out
