"""The one-way import rules of docs/architecture.md section 2 between the top-level packages,
checked on the source files (inside pipeline/, import-linter's contracts in pyproject.toml
check them: tests/house/test_import_contracts.py).

The repository root is the package `dask_dane`, and imports inside it are relative, so the
edges are resolved here from the files alone (as an editor or an import-graph tool would),
without importing anything.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "dask_dane"
# Modules allowed to import `distributed` (docs/architecture.md section 2: the cluster, graph
# and driver modules; bench/).
DISTRIBUTED_IMPORTERS = {
    "pipeline/launchers/cluster.py",
    "pipeline/launchers/jobqueue.py",  # the batch-queue clusters (dask-jobqueue, the hpc extra)
    "pipeline/engine/round/graph.py",
    "pipeline/training.py",  # a run's start: its client, the shards' load tasks
    "pipeline/engine/run/driver.py",  # the one loop over rounds, on the run's client
    "pipeline/engine/run/pipelined.py",  # the Dask graph's chained rounds
    "pipeline/engine/run/fetch.py",  # what the driver takes from the cluster each round
    "pipeline/engine/run/bounded.py",  # the driver's requests, bounded by --timeout
    # --collective torch: the driver of segments (its lock, its queue) and their tasks (the
    # group's rendezvous through a Variable, the rows through a Queue).
    "pipeline/engine/run/segments.py",
    "pipeline/engine/run/segment.py",
    "pipeline/engine/run/segment_cluster.py",
    # --overhead-share: a round's costs timed on the workers as a run starts (a group formed
    # there as a segment's is, on the worker's own address).
    "pipeline/setup/round_costs.py",
    "pipeline/observe/dashboard.py",  # the /dane page and dane_* metrics live in the scheduler
    # Registers how our dataclasses cross a comm (their tensors as frames) with distributed's
    # serialization, in every process that imports the worker tasks.
    "pipeline/engine/round/wire.py",
}
TYPER_IMPORTERS = {
    "cli/commands.py", "cli/options.py", "cli/lazy.py", "cli/advise.py", "cli/after_run.py",
    "bench/common/options.py",
}  # fmt: skip
# Layers in import order: a module may import its own layer and those after it, never before.
# The root's own modules (__init__, __main__) are the package's face, above every layer.
LAYERS = ("cli", "bench", "pipeline", "models|datasets|presets")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _sources(folder: str = "") -> list[Path]:
    # docs/_ext: the Sphinx extension, a client of the installed package (it imports
    # dask_dane by name, as sphinx-build runs it), not a part of it.
    skip = {"tests", ".venv", ".git", ".pixi", "build", "_ext", "_build"}
    return sorted(
        p for p in (ROOT / folder).rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)
    )


MODULES = {_module(p) for p in _sources()}


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (anywhere in the file), relative imports resolved."""
    package = _module(path) if _is_package(path) else _module(path).rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from . import tasks` imports the module tasks; `from .x import f`, module x.
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                names.add(candidate if candidate in MODULES else base)
    return names


def _own(names: set[str]) -> set[str]:
    return {n for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}


def _layer(module: str) -> int:
    top = module.split(".")[1]
    if top == "__main__":
        return -1  # `python -m dask_dane`: the face, which runs the command line
    return next(i for i, layer in enumerate(LAYERS) if top in layer.split("|"))


def test_the_root_holds_only_the_package_face():
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_imports_inside_the_package_are_relative():
    for path in _sources():
        tree = ast.parse(path.read_text())
        absolute = [
            node.lineno
            for node in ast.walk(tree)
            if ((isinstance(node, ast.ImportFrom) and not node.level and node.module) or "")
            .split(".")[0]
            .startswith(PACKAGE)
            or (
                isinstance(node, ast.Import) and any(a.name.startswith(PACKAGE) for a in node.names)
            )
        ]
        assert not absolute, f"{path.relative_to(ROOT)}:{absolute} imports {PACKAGE} absolutely"


def test_relative_imports_resolve_to_files_of_the_tree():
    for path in _sources():
        missing = _own(_imports(path)) - MODULES
        assert not missing, f"{path.relative_to(ROOT)} imports {missing}, which is no file here"


def test_imports_point_one_way_cli_bench_pipeline_models_datasets():
    for path in _sources():
        module = _module(path)
        if module == PACKAGE:
            continue
        upward = {n for n in _own(_imports(path)) if n != PACKAGE and _layer(n) < _layer(module)}
        where = "docs/architecture.md section 2"
        assert not upward, f"{path.relative_to(ROOT)} imports {upward} ({where})"


@pytest.mark.parametrize("folder", ["models", "datasets"])
def test_models_and_datasets_never_import_pipeline(folder):
    found = set()
    for path in _sources(folder):
        found |= _own(_imports(path))
        bad = {n for n in _imports(path) if n.startswith(f"{PACKAGE}.pipeline")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
    assert found, f"no import inside {folder}/ was resolved: is the parser blind?"


def test_only_cli_and_the_bench_app_import_typer():
    for path in _sources():
        relative = str(path.relative_to(ROOT))
        uses_typer = any(n.split(".")[0] == "typer" for n in _imports(path))
        benchmark_cli = fnmatch(relative, "bench/*/cli.py")  # each benchmark's own commands
        assert not uses_typer or relative in TYPER_IMPORTERS or benchmark_cli, relative


def test_bench_imports_the_engines_modules_directly_and_never_the_command_line():
    # pipeline/__init__.py exports nothing: each name comes from the module that defines it.
    # cli/ mounts `dane bench`, so bench/ importing cli/ would be a cycle through the app.
    engine_modules = set()
    for path in _sources("bench"):
        own, where = _own(_imports(path)), path.relative_to(ROOT)
        engine_modules |= {n for n in own if n.startswith(f"{PACKAGE}.pipeline.")}
        assert f"{PACKAGE}.pipeline" not in own, f"{where} imports from pipeline/__init__.py"
        cli = {n for n in own if f"{n}.".startswith(f"{PACKAGE}.cli.")}
        assert not cli, f"{where} imports {cli}: the command line mounts bench/, not the reverse"
    assert len(engine_modules) > 10, "bench's imports of the engine were not resolved"


def test_the_pipeline_package_holds_only_its_docstring():
    body = ast.parse((ROOT / "pipeline" / "__init__.py").read_text()).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr), "pipeline/__init__.py exports nothing"


def test_bench_is_a_handful_of_benchmark_packages_each_with_its_commands():
    packages = {p.parent.name for p in (ROOT / "bench").glob("*/__init__.py")}
    assert packages == {
        "common", "training", "convergence", "scaling", "ddp", "network", "soak", "gpu", "prepare",
        "startup", "collective", "headline", "local_step",
    }  # fmt: skip
    assert not [p.name for p in (ROOT / "bench").glob("*.py")
                if p.name not in ("__init__.py", "app.py")]  # fmt: skip
    for package in packages - {"common"}:
        assert (ROOT / "bench" / package / "cli.py").exists(), package


def test_only_cluster_graph_loop_and_bench_import_distributed():
    for path in _sources():
        relative = str(path.relative_to(ROOT))
        if relative in DISTRIBUTED_IMPORTERS or relative.startswith("bench/"):
            continue
        cluster_packages = ("distributed", "dask_cuda", "dask_jobqueue")
        uses = {n for n in _imports(path) if n.split(".")[0] in cluster_packages}
        assert not uses, f"{relative} imports {uses}"


def test_algorithms_use_torch_only_and_import_neither_config_nor_dask():
    for path in _sources("pipeline/algorithms"):
        names = _imports(path)
        third_party = {n.split(".")[0] for n in names} - {PACKAGE}
        assert not (third_party & {"dask", "distributed", "numpy", "zarr", "typer"}), path
        assert f"{PACKAGE}.pipeline.setup.config" not in names, f"{path} imports the run config"


def test_the_module_graph_has_no_cycle():
    graph = {_module(p): _own(_imports(p)) - {PACKAGE} for p in _sources()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_engine_writes_nothing_to_the_terminal_itself():
    # Its lines reach the user through Callbacks.on_note (engine/run/callbacks.py): the CLI's
    # bar and the API's lines show them, a benchmark or a notebook chooses.
    for path in _sources("pipeline/engine"):
        for node in ast.walk(ast.parse(path.read_text())):
            called = node.func if isinstance(node, ast.Call) else None
            assert not (isinstance(called, ast.Name) and called.id == "print"), path
            named = isinstance(node, ast.Attribute) and node.attr in ("stderr", "stdout")
            assert not (named and getattr(node.value, "id", "") == "sys"), path
