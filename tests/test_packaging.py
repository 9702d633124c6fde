"""What an install puts into site-packages: only ``accel`` at the top level.

``backends`` and ``adbench`` are other projects' names on the package index, so setup.py
installs the repository's top-level ``backends/`` and ``adbench/`` folders as
``accel.backends`` and ``accel.adbench``.  The test runs setup.py's package computation
(setuptools' ``setup`` replaced by a recorder) and checks it covers every package folder.
"""
import pathlib
import runpy
import pytest
import setuptools

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _setup_kwargs(monkeypatch):
    seen = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: seen.update(kw))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    return seen


def test_only_accel_at_the_top_level(monkeypatch):
    kw = _setup_kwargs(monkeypatch)
    assert {p.split(".")[0] for p in kw["packages"]} == {"accel"}


def test_every_package_folder_is_installed(monkeypatch):
    kw = _setup_kwargs(monkeypatch)
    folders = {"accel": "accel", **{name: folder for name, folder in kw["package_dir"].items()}}
    expected = set()
    for name, folder in folders.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            expected.add(".".join((name,) + rel))
    assert expected <= set(kw["packages"])
    assert kw["package_dir"] == {"accel.backends": "backends", "accel.adbench": "adbench"}
    assert "data/**/*" in kw["package_data"]["accel.adbench"]


def test_distribution_name_is_not_accel():
    """``accel`` on the package index is a computational-chemistry package."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == "accel-arrays"
