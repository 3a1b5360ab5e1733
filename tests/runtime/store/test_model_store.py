"""Checkpoints on this PC: list, verify, import and delete."""

import json
import shutil
import subprocess
import sys

import pytest

from runtime import CheckpointError, UsageError
from runtime.store.model_store import delete, import_folder, list_models, verify
from tests.paths import ROOT


def test_import_verifies_then_registers_in_place(home, tmp_path):
    folder = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "my-model")
    m = import_folder(folder)
    assert m.source == "imported" and m.path == folder.resolve() and m.submodels == ("1.5M", "1.0M", "0.5M")
    names = {x.name: x for x in list_models()}
    assert "my-model" in names and "demo" in names and names["demo"].source == "bundled"
    # deleting an imported model forgets it and keeps the files
    assert "left untouched" in delete("my-model")
    assert folder.exists() and "my-model" not in {x.name for x in list_models()}


def test_import_refuses_a_broken_folder(home, tmp_path):
    folder = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "broken")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match="cannot be imported: .*truncated"):
        import_folder(folder)
    imported = home / "models" / "imported.json"
    assert not imported.exists() or "broken" not in imported.read_text()


def test_verify_uses_the_download_manifest(home, tmp_path):
    from runtime.store.download.transfer import git_blob_sha1, record_path, sha256_of

    folder = shutil.copytree(ROOT / "assets" / "demo-nvfp4", home / "models" / "nvidia--Demo")
    files = {p.name: {"size": p.stat().st_size, "sha256": sha256_of(p) if p.suffix == ".safetensors" else None,
                      "git_sha1": None if p.suffix == ".safetensors" else git_blob_sha1(p)}
             for p in folder.iterdir()}
    record_path(folder).parent.mkdir()
    record = {"repo": "nvidia/Demo", "revision": "x", "files": files, "complete": True}
    record_path(folder).write_text(json.dumps(record))
    report = verify(folder)
    assert report.ok and report.checked == len(files)
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-10] ^= 0xFF  # damage a byte inside the tensor data: the header still parses
    (folder / "model.safetensors").write_bytes(bytes(data))
    report = verify(folder)
    assert not report.ok and any("SHA-256" in p for p in report.problems)
    m = next(x for x in list_models() if x.name == "nvidia--Demo")
    assert m.source == "downloaded" and m.repo == "nvidia/Demo"
    assert "deleted nvidia--Demo" in delete("nvidia--Demo") and not folder.exists()


def test_the_bundled_demo_cannot_be_deleted(home):
    with pytest.raises(UsageError, match="cannot be deleted"):
        delete("demo")


@pytest.mark.slow
def test_cli_contract(home, tmp_path):
    env = {**__import__("os").environ, "ELASTIC_CHAT_HOME": str(home)}
    folder = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "imp")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "runtime", "models", *args], capture_output=True, text=True,
                              cwd=ROOT, env=env)

    out = run("import", str(folder))
    assert out.returncode == 0 and json.loads(out.stdout)["name"] == "imp"
    listing = run("list")
    assert listing.returncode == 0 and "imp" in listing.stdout and "star-elastic-30b-nvfp4" in listing.stdout
    probe = run("probe")
    assert probe.returncode == 0 and "Default:" in probe.stdout
    assert json.loads(run("probe", "--json").stdout)["ram_total_bytes"] > 0
    assert run("delete", "imp").returncode == 0
    bad = run("delete", "nothing-here")
    assert bad.returncode == 2 and bad.stderr.startswith("error: no model called 'nothing-here'")
    broken = run("verify", str(tmp_path))
    assert broken.returncode == 1 and "FAILED" in broken.stdout


@pytest.mark.parametrize("folder_name, expected", [("demo", "demo-2"), ("my-model", "my-model-3"),
                                                   ("x" * 120, "x" * 94 + "-2")])  # cut to 99 + "…", taken
def test_a_folder_named_like_a_listed_model_imports_under_a_free_name(home, tmp_path, folder_name, expected):
    """The window imports a folder under its own name: a copy of the demo called "demo" (or a second folder of
    a name imported before) gets the first free "-N" instead of an error that asks for a --name the window
    does not have. A name passed explicitly is never changed: it is refused when taken."""
    for n, taken in enumerate(("my-model", "my-model-2", "x" * 99 + "…")):
        import_folder(shutil.copytree(ROOT / "assets" / "demo", tmp_path / f"other{n}"), taken)
    m = import_folder(shutil.copytree(ROOT / "assets" / "demo", tmp_path / "new" / folder_name))
    assert m.name == expected and len(m.name) <= 100 and expected in {x.name for x in list_models()}
    with pytest.raises(UsageError, match="already exists; pass another name"):
        import_folder(shutil.copytree(ROOT / "assets" / "demo", tmp_path / "again"), expected)


def test_a_listed_folder_is_called_by_its_listed_name(home, tmp_path):
    """The window names a loaded model as the models list does: a folder "demo" imported as "demo-2" is
    "demo-2" in the status bar too (it said "demo" beside the picker's "demo-2"); an unlisted folder is
    called by its own name."""
    from runtime.store.model_store import name_of

    folder = shutil.copytree(ROOT / "assets" / "demo", tmp_path / "demo")
    assert name_of(folder) == "demo"  # not listed yet
    assert import_folder(folder).name == "demo-2"
    assert name_of(folder) == name_of(str(folder) + "/") == "demo-2"
    assert name_of(ROOT / "assets" / "demo") == next(m.name for m in list_models() if m.source == "bundled")
