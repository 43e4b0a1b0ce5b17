"""FracHub's packages form layers whose imports only point down: a module may import its own
layer and the layers its row below allows, never one above. The table is CONTRIBUTING.md's
map of the house; this test reads every production module's imports (``ast``, module-level
and inside functions alike) and names each import that points the wrong way.

    6 hub side: commands   hub_ext.cli          everything, but the engine, the service and
                                                the simulators only inside the functions of
                                                the commands that drive them
    5 hub side: spawners   spawner              the client, common; scheduler.backends.kubernetes
                                                for the Kubernetes spawner only
    4 hub side: client     hub_ext.client, hub_ext.magics, hub_ext.configure, hub_ext.kernelspec,
                           hub_ext.workdir      common only
    3 service              scheduler.service    backends, simulators, engine, common
    2 backends/simulators  scheduler.backends, .scenario, .fleet, .openb, .fields, .progress
                                                engine, common
    1 engine               scheduler.engine     common
    0 common               scheduler.common     nothing of ours (``scheduler`` itself only
                                                holds the version)
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from heavy_imports import heavy_modules_after

pytestmark = pytest.mark.unit

REPO = Path(__file__).parents[2]
OURS = ("scheduler", "hub_ext", "spawner")


@dataclass(frozen=True)
class Layer:
    number: int
    name: str
    packages: tuple[str, ...]


LAYERS = (
    Layer(0, "common", ("scheduler.common",)),
    Layer(1, "engine", ("scheduler.engine",)),
    Layer(
        2,
        "backends and simulators",
        (
            "scheduler.backends",
            "scheduler.scenario",
            "scheduler.fleet",
            "scheduler.openb",
            "scheduler.fields",
            "scheduler.progress",
        ),
    ),
    Layer(3, "service", ("scheduler.service",)),
    Layer(
        4,
        "the user's client",
        (
            "hub_ext.client",
            "hub_ext.magics",
            "hub_ext.configure",
            "hub_ext.kernelspec",
            "hub_ext.workdir",
        ),
    ),
    Layer(5, "spawners", ("spawner",)),
    Layer(6, "commands", ("hub_ext.cli",)),
)
MAY_IMPORT = {
    0: {0},
    1: {0, 1},
    2: {0, 1, 2},
    3: {0, 1, 2, 3},
    4: {0, 4},
    5: {0, 4, 5},
    6: {0, 1, 2, 3, 4, 5, 6},
}
"""The layers each layer's modules may import (its own included)."""
AT_MODULE_LEVEL = {6: {0, 4, 5, 6}}
"""Where a layer may import only some of those at module level: the commands load the
engine, the service and the simulators inside the command that needs them, so that
``frachub --help`` and the job commands never do."""
EXCEPTIONS = {
    ("spawner.kube", "scheduler.backends.kubernetes"),
    ("spawner.local", "scheduler.backends.confinement"),
}
"""(module, package) pairs allowed past the table: the Kubernetes spawner reserves GPUs
through the Kubernetes backend's objects and client; the local spawner holds servers in
control groups as the local backend holds jobs."""


TOPS = {"scheduler": 0, "hub_ext": 4}
"""The top packages themselves (their ``__init__``): ``scheduler`` holds only the version,
``hub_ext`` only a docstring."""


def layer_of(module: str) -> Layer:
    """The layer of the longest package in the table that ``module`` is, or is inside."""
    if module in TOPS:
        return LAYERS[TOPS[module]]
    matches = [
        (len(package), layer)
        for layer in LAYERS
        for package in layer.packages
        if module == package or module.startswith(package + ".")
    ]
    assert matches, f"{module} is in no layer: add its package to LAYERS"
    return max(matches, key=lambda match: match[0])[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def production_modules() -> list[Path]:
    return sorted(
        path
        for top in OURS
        for path in (REPO / top).rglob("*.py")
        if "migrations" not in path.parts  # Alembic's scripts: the service's own history
    )


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    in_function: bool


def imports_of(path: Path) -> list[Import]:
    """Every import of our packages in ``path``, with whether it sits inside a function."""
    tree = ast.parse(path.read_text())
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else None
    package = package or module_name(path)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    targets = [".".join([*base, *([child.module] if child.module else [])])]
                elif child.module:
                    targets = [child.module]
            found.extend(
                Import(target, child.lineno, in_function)
                for target in targets
                if target.split(".")[0] in OURS
            )
            visit(child, inside)

    visit(tree, False)
    return found


def upward_imports(path: Path) -> list[str]:
    """What ``path`` imports against the table, each as one line naming the module, the
    import and the layers."""
    module = module_name(path)
    layer = layer_of(module)
    wrong = []
    for found in imports_of(path):
        target = layer_of(found.target)
        if any(
            module == excepted and (found.target + ".").startswith(package + ".")
            for excepted, package in EXCEPTIONS
        ):
            continue
        allowed = MAY_IMPORT[layer.number]
        if not found.in_function:
            allowed = AT_MODULE_LEVEL.get(layer.number, allowed)
        if target.number not in allowed:
            where = "inside a function" if found.in_function else "at module level"
            wrong.append(
                f"{path.relative_to(REPO)}:{found.line}: {module} (layer {layer.number}, "
                f"{layer.name}) imports {found.target} (layer {target.number}, {target.name}) "
                f"{where}"
            )
    return wrong


@pytest.mark.parametrize("path", production_modules(), ids=lambda path: str(path.relative_to(REPO)))
def test_imports_point_down_the_layers(path: Path) -> None:
    wrong = upward_imports(path)
    assert not wrong, "imports that point up the layers:\n" + "\n".join(wrong)


def test_the_table_finds_an_upward_import(tmp_path: Path, monkeypatch) -> None:
    """The check itself: an engine module importing the service is named, with its line."""
    engine = tmp_path / "scheduler" / "engine"
    engine.mkdir(parents=True)
    bad = engine / "bad.py"
    bad.write_text("from scheduler.engine import model\n\n\ndef f():\n    import hub_ext.client\n")
    monkeypatch.setitem(globals(), "REPO", tmp_path)
    [wrong] = upward_imports(bad)
    assert wrong == (
        "scheduler/engine/bad.py:5: scheduler.engine.bad (layer 1, engine) imports "
        "hub_ext.client (layer 4, the user's client) inside a function"
    )


@pytest.mark.parametrize(
    "code",
    [
        "import hub_ext.client",
        # (the magics need IPython, the hub extra: tests/extras/test_magics.py checks them)
        # the entry point, building the tree for a job command as `frachub jobs` does
        "from hub_ext.cli.main import build_parser; build_parser(['jobs'])",
    ],
)
def test_the_client_and_the_cli_load_no_engine(code: str) -> None:
    """The REST client, the magics and the ``frachub`` command (but for the commands that
    drive the scheduler) install and import without the engine and its number crunchers."""
    loaded = heavy_modules_after(code)
    assert loaded == [], f"{code!r} imported {loaded}"
