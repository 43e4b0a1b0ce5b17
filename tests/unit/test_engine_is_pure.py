"""The engine takes state and time as input and does no I/O: its imports must keep it so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ENGINE = Path(__file__).parents[2] / "scheduler" / "engine"
FORBIDDEN = {
    "time",
    "datetime",
    "random",
    "os",
    "socket",
    "subprocess",
    "asyncio",
    "tornado",
    "sqlalchemy",
    "kubernetes_asyncio",
    "requests",
    "yaml",
    "threading",
    "logging",
}


@pytest.mark.parametrize(
    "path", sorted(ENGINE.rglob("*.py")), ids=lambda p: str(p.relative_to(ENGINE))
)
def test_engine_module_imports_nothing_impure(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, f"{path.name} imports {sorted(imported & FORBIDDEN)}"
    outside = {name for name in imported if name == "scheduler"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scheduler"):
            assert node.module.startswith(("scheduler.engine", "scheduler.common")), (
                f"{path.name} imports {node.module}: the engine depends on nothing outside it "
                "but the shared vocabulary (scheduler.common)"
            )
    assert outside <= {"scheduler"}
