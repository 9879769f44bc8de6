"""The core (`control_plane/`) depends on its ports alone: it imports neither the adapters nor the
HTTP APIs (`http_api/`, which sit on top of it), nor any AWS library."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "control_plane"
OUTSIDE = ("adapters", "http_api", "boto3", "botocore", "pynamodb", "infra", "examples")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_core_imports_nothing_built_on_it_nor_any_aws_library() -> None:
    offending = {
        f"{path.relative_to(CORE.parent)}: {name}"
        for path in CORE.rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] in OUTSIDE
    }
    assert sorted(offending) == []
    assert (CORE / "invocation.py").exists()  # the walk saw the core
