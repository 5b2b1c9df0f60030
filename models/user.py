"""A user's own model: a callable named by import path (FILE.py:NAME, package.module:NAME).

The callable is resolved on the driver and travels to the workers by value, as cloudpickle
bytes inside the ModelSpec that every task receives: a model written in a local file (or in
a notebook) reaches workers that never saw the file, replacement workers joining mid-run
included, with nothing to install. A callable from an installed package travels by
reference, so the package must be installed on the workers; a worker that cannot import it
says which worker, which module, and what to do.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import os
import socket
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import cloudpickle
from torch import nn

# The keywords a builder may name; it receives those its signature lists.
BUILDER_KEYWORDS = ("sample_shape", "in_channels", "num_classes")


def is_import_path(name: str) -> bool:
    """True for FILE.py:NAME and package.module:NAME (built-in names hold no ':')."""
    return ":" in name


def model_file_hint(name: str) -> str | None:
    """For a --model that names a file but no callable in it (`mymodel.py`): the fix, with
    the functions and classes the file defines. None for a name that is no file."""
    file = Path(name).expanduser()
    if not name.endswith(".py") and not file.is_file():
        return None
    takes = "--model takes FILE.py:NAME"
    if not file.is_file():
        return (
            f"{takes}; there is no file {name} (check the path), nor a built-in model of that name"
        )
    if file.suffix != ".py":
        return f"{takes}; {name} is a file but not a Python file (.py)"
    names = defined_names(file)
    if isinstance(names, str):  # the file does not read or parse: say why
        return f"{takes}; {name} {names}"
    if not names:
        return f"{takes}; {name} defines no function or class: add one that returns an nn.Module"
    return f"{takes}; {name} defines: {', '.join(names)} (e.g. --model {name}:{names[0]})"


def defined_names(file: Path) -> list[str] | str:
    """The public functions and classes at the top of a Python file, read with `ast`: never
    imported, since importing a user's file runs it. A string saying why where it cannot be
    read or parsed."""
    try:
        tree = ast.parse(file.read_text(), filename=str(file))
    except (OSError, UnicodeDecodeError) as err:
        return f"cannot be read ({type(err).__name__}: {err})"
    except SyntaxError as err:
        return f"does not parse (SyntaxError at line {err.lineno}: {err.msg}); fix the file"
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [
        node.name for node in tree.body if isinstance(node, kinds) and not node.name.startswith("_")
    ]


def resolve(path: str) -> Callable[..., nn.Module]:
    """The callable that `path` names; ValueError naming what is wrong and the fix."""
    where, _, attribute = path.rpartition(":")
    if not where or not attribute:
        raise ValueError(
            f"--model {path!r} is not an import path; write FILE.py:NAME or package.module:NAME"
        )
    module = _load_file(where, path) if where.endswith(".py") else _import(where, path)
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            names = defined_names(Path(where)) if where.endswith(".py") else None
            listed = f" ({where} defines: {', '.join(names)})" if isinstance(names, list) else ""
            raise ValueError(
                f"--model {path}: {where} has no {attribute!r}; check the name after the ':'"
                + listed
            )
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(
            f"--model {path}: {attribute!r} is a {type(target).__name__}, not a callable; name "
            "a function or class that returns an nn.Module"
        )
    return target  # type: ignore[return-value]


def _load_file(file: str, path: str) -> ModuleType:
    source = Path(file).expanduser()
    if not source.is_file():
        raise ValueError(f"--model {path}: no file {file}; check the path before the ':'")
    # A name of its own per file, so two model files called model.py do not collide.
    digest = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    name = f"dask_dane_user_{source.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ValueError(
            f"--model {path}: importing {file} failed ({type(err).__name__}: {err}); fix the file"
        ) from None
    cloudpickle.register_pickle_by_value(module)  # its functions travel as code, not names
    return module


def _import(module_name: str, path: str) -> ModuleType:
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"--model {path}: cannot import {module_name} ({err}); install it, or pass a "
            "file as FILE.py:NAME"
        ) from None
    except Exception as err:
        raise ValueError(
            f"--model {path}: importing {module_name} failed ({type(err).__name__}: {err})"
        ) from None
    _pickle_local_module_by_value(module)
    return module


def _pickle_local_module_by_value(module: ModuleType) -> None:
    """A module imported from the user's own folders (not an installed package) travels by
    value too: the workers would not find it."""
    file = getattr(module, "__file__", None)
    top = module.__name__.split(".")[0]
    # __main__ (a notebook) is pickled by value anyway; dask_dane itself must stay by
    # reference: its classes by value would be strangers to the workers' own.
    if not file or top in ("__main__", __name__.split(".")[0]):
        return
    installed = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib")}
    if not any(os.path.abspath(file).startswith(os.path.abspath(p)) for p in installed):
        cloudpickle.register_pickle_by_value(sys.modules[top])


def callable_name(builder: Callable[..., nn.Module]) -> str:
    """The import path a Python callable is recorded under (config.toml's model)."""
    module = getattr(builder, "__module__", None) or "__main__"
    return f"{module}:{getattr(builder, '__qualname__', type(builder).__name__)}"


def to_bytes(builder: Callable[..., nn.Module]) -> bytes:
    """The builder as it travels to workers (by value unless it comes from a package)."""
    return cloudpickle.dumps(builder)


def from_bytes(data: bytes, name: str) -> Callable[..., nn.Module]:
    """The builder back on a worker; ValueError naming the worker and the missing module.
    Loaded each time: a worker builds a model once per thread and spec
    (pipeline/engine/round/worker_state.py keeps the module), so nothing here is kept."""
    try:
        return cloudpickle.loads(data)
    except ImportError as err:
        missing = getattr(err, "name", None) or str(err)
        raise ValueError(
            f"worker {socket.gethostname()}:{os.getpid()} cannot import module {missing} "
            f"for --model {name}; install it on every worker, or pass the model as "
            "FILE.py:NAME so that it travels with the tasks"
        ) from None


def call_builder(
    builder: Callable[..., nn.Module], *, sample_shape: tuple[int, ...], num_classes: int, name: str
) -> nn.Module:
    """builder(...) with the keywords its signature names; through **kwargs, num_classes."""
    offered = {
        "sample_shape": tuple(sample_shape),
        "in_channels": int(sample_shape[0]) if sample_shape else 1,
        "num_classes": num_classes,
    }
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):
        parameters = {}
    named = {key: offered[key] for key in BUILDER_KEYWORDS if key in parameters}
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        named.setdefault("num_classes", num_classes)  # torchvision's builders take **kwargs
    try:
        model = builder(**named)
    except Exception as err:
        given = ", ".join(f"{k}={v!r}" for k, v in named.items()) or "no arguments"
        raise ValueError(
            f"--model {name}: calling it with {given} failed ({type(err).__name__}: {err}); "
            f"it is called with whichever of {', '.join(BUILDER_KEYWORDS)} it names"
        ) from None
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"--model {name} returned a {type(model).__name__}, not a torch.nn.Module; "
            "return the network"
        )
    return model
