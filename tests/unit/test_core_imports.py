"""The core (`control_plane/`) depends on its ports alone: it imports neither the adapters nor the
HTTP APIs (`http_api/`, which sit on top of it), nor any AWS library, nor the OpenTelemetry SDK (an extra)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "control_plane"
OUTSIDE = ("adapters", "http_api", "boto3", "botocore", "pynamodb", "infra", "examples", "opentelemetry")


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


def _module(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _edges(path: Path, modules: set[str]) -> set[str]:
    """The core's modules `path` imports; `from package import submodule` is an edge to the submodule."""
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                edges.add(submodule if submodule in modules else node.module)
    return edges & modules


def test_the_cores_modules_import_each_other_without_a_cycle() -> None:
    modules = {_module(path): path for path in CORE.rglob("*.py")}
    graph = {name: _edges(path, set(modules)) - {name} for name, path in modules.items()}
    done: set[str] = set()

    def cycle_from(name: str, trail: list[str]) -> list[str] | None:
        if name in trail:
            return [*trail[trail.index(name) :], name]
        if name in done:
            return None
        for imported in sorted(graph[name]):
            found = cycle_from(imported, [*trail, name])
            if found:
                return found
        done.add(name)
        return None

    cycles = [c for name in sorted(graph) if (c := cycle_from(name, []))]
    assert cycles == []
    assert "control_plane.effects" in graph["control_plane.invocation"]  # the graph has edges
