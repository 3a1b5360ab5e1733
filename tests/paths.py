"""Where the tests find the repository's files, in one place (test files live at different depths)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "tests" / "probes"
DEMO = ROOT / "assets" / "demo"
DEMO_NVFP4 = ROOT / "assets" / "demo-nvfp4"
