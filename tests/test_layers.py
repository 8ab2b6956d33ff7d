"""Every module at the top of the kbroker package has a place in the layer contract that
`make lint` checks (pyproject.toml, [tool.importlinter]), so none escapes it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_top_level_module_is_in_one_layer() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in settings["contracts"] if c["type"] == "layers"]
    named = [
        name for layer in contract["layers"] for name in re.findall(r"kbroker\.[A-Za-z_]+", layer)
    ]
    assert len(named) == len(set(named)), "a module is in two layers"
    package = ROOT / "kbroker"
    modules = {
        f"kbroker.{path.stem}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert modules, "found no module under kbroker/"
    assert modules <= set(named), sorted(modules - set(named))


def test_every_package_under_kbroker_has_an_init() -> None:
    # A folder without __init__.py is a namespace package: setuptools' find leaves it out
    # of the wheel, and the layer contract does not see it.
    missing = [
        str(d.relative_to(ROOT))
        for d in (ROOT / "kbroker").rglob("*")
        if d.is_dir()
        and d.name != "__pycache__"
        and any(d.glob("*.py"))
        and not (d / "__init__.py").exists()
    ]
    assert not missing, missing


def test_the_coordinator_runtime_sits_between_the_coordinators_and_the_replicas() -> None:
    # Every coordinator loads and writes its internal topic through the runtime, which
    # appends through the replica manager: neither may reach the other way.
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in settings["contracts"] if c["type"] == "layers"]
    depth = {
        name: i
        for i, layer in enumerate(contract["layers"])
        for name in re.findall(r"kbroker\.[A-Za-z_]+", layer)
    }
    runtime = depth["kbroker.coordinator_runtime"]
    for coordinator in ("coordinator", "txn", "share", "schemas"):
        assert depth[f"kbroker.{coordinator}"] < runtime, coordinator
    assert runtime < depth["kbroker.replica"]
    assert settings["exclude_type_checking_imports"] is False  # types count too
