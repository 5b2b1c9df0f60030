"""The one-way import rules of DESIGN.md section 2, checked on the source files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Modules allowed to import `distributed` (DESIGN.md: only the cluster, graph and driver).
DISTRIBUTED_IMPORTERS = {"pipeline/cluster.py", "pipeline/graph.py", "pipeline/loop.py"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", ["models", "datasets"])
def test_models_and_datasets_never_import_pipeline(folder):
    for path in _sources(folder):
        bad = {n for n in _imports(path) if n.startswith("dask_dane.pipeline")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_only_cli_imports_typer():
    for folder in ("pipeline", "models", "datasets"):
        for path in _sources(folder):
            assert not any(n.split(".")[0] == "typer" for n in _imports(path)), path


def test_only_cluster_graph_and_loop_import_distributed():
    for path in _sources("pipeline"):
        relative = str(path.relative_to(ROOT))
        if relative in DISTRIBUTED_IMPORTERS:
            continue
        uses = {n for n in _imports(path) if n.split(".")[0] in ("distributed", "dask_cuda")}
        assert not uses, f"{relative} imports {uses}"


def test_algorithms_use_torch_only():
    for path in _sources("pipeline/algorithms"):
        third_party = {n.split(".")[0] for n in _imports(path)} - {
            "__future__",
            "dataclasses",
            "typing",
            "math",
            "collections",
            "torch",
            "dask_dane",
        }
        assert not (third_party & {"dask", "distributed", "numpy", "zarr"}), path
