"""Options and helpers that several `dane bench` commands share.

A benchmark that trains through dask-dane holds its runs' settings as one RunConfig (its
`run` field, specs.run_defaults) beside its own fields (specs.option), and its command's options
are made from the spec (`spec_options`): the RunConfig fields it lets a user set (its
RUN_FLAGS), with RunConfig's help texts (or the spec's RUN_HELP, where a setting means more
in the bench) and the bench's defaults, the spec's REQUIRED among them required; then its
own fields, with their help and defaults. Nothing of either is restated here.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Annotated, Any

import typer

from .specs import default_run, run_flags, spec_of

JsonOut = Annotated[Path | None, typer.Option("--json", help="Write the results here (JSON).")]
PlotOut = Annotated[Path | None, typer.Option("--plot", help="Write the figure here (PNG).")]
Workdir = Annotated[Path, typer.Option(help="Where stores and run directories go.")]
LocalSteps = Annotated[int, typer.Option(help="Local steps K per round.")]
GradSample = Annotated[int, typer.Option(help="DANE: gradient rows per shard; 0: all.")]
Networks = Annotated[
    list[str] | None,
    typer.Option("--network", help="BANDWIDTH_GBPS,LATENCY_MS to project onto (repeatable)."),
]


def parse_numbers(text: str, flag: str, kind: type) -> tuple:
    try:
        return tuple(kind(v) for v in text.split(","))
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise ValueError(
            f"{flag} must be a comma-separated list of {what} (got {text!r})"
        ) from None


def spec_options(spec_type: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command taking `**flags`: its options become the spec's (RUN_FLAGS, then its
    own fields), before the command's own parameters (--json, --plot, ...)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(command, eval_str=True).parameters.values()
        kept = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
        generated = [*_run_parameters(spec_type), *_own_parameters(spec_type)]
        command.__signature__ = inspect.Signature([*generated, *kept])  # type: ignore[attr-defined]
        return command

    return decorate


def spec_from_flags(spec_type: type, flags: dict[str, Any], **converted: Any) -> Any:
    """The spec a command's flags name (a tuple field's comma-separated text parsed;
    `converted`: values the command parsed itself), as specs.spec_of makes it."""
    own_fields = {f.name: f for f in fields(spec_type) if f.name != "run"}
    hints = typing.get_type_hints(spec_type)
    flags = _aliases_applied(own_fields.values(), flags)
    parsed = {
        name: _parsed(value, hints[name], own_fields[name]) if name in own_fields else value
        for name, value in flags.items()
        if name in own_fields or name in run_flags(spec_type)
    }  # `converted` may hold the run itself
    return spec_of(spec_type, **{**parsed, **converted})


def _run_parameters(spec_type: type) -> list[inspect.Parameter]:
    from ...pipeline.algorithms.parts.hyperparameters import with_default
    from ...pipeline.setup.config import RunConfig

    if not run_flags(spec_type):
        return []
    base, hints = default_run(spec_type), typing.get_type_hints(RunConfig)
    declared = {f.name: f for f in fields(RunConfig)}
    parameters = []
    required, own_help = getattr(spec_type, "REQUIRED", ()), getattr(spec_type, "RUN_HELP", {})
    for name in run_flags(spec_type):
        text = own_help.get(name) or declared[name].metadata["declaration"].help
        default = ... if name in required else getattr(base, name)
        text = text if name in required else with_default(text, default)
        annotation = Annotated[hints[name], typer.Option(help=text, show_default=False)]
        parameters.append(_keyword(name, annotation, default))
    return parameters


def _own_parameters(spec_type: type) -> list[inspect.Parameter]:
    """The spec's fields declared with specs.option (a tuple as comma-separated text)."""
    from ...pipeline.algorithms.parts.hyperparameters import with_default

    hints = typing.get_type_hints(spec_type)
    parameters = []
    for f in fields(spec_type):
        if "help" not in f.metadata:
            continue
        default, kind = f.default, hints[f.name]
        required = default is MISSING
        flag = f.metadata.get("flag")
        declared = (flag,) if flag else ()
        if typing.get_origin(kind) is tuple:  # typed as comma-separated text
            kind = str
            if not required:
                default = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default)
        text = f.metadata["help"] if required else with_default(f.metadata["help"], default)
        info = typer.Option(*declared, help=text, show_default=False)
        parameters.append(_keyword(f.name, Annotated[kind, info], ... if required else default))
        for alias in f.metadata.get("aliases", ()):  # a former name: read, not listed
            hidden = Annotated[kind | None, typer.Option(alias, hidden=True)]
            parameters.append(_keyword(_alias_parameter(f.name, alias), hidden, None))
    return parameters


def _alias_parameter(name: str, alias: str) -> str:
    return f"{name}__{alias.lstrip('-').replace('-', '_')}"


def _aliases_applied(own_fields: Any, flags: dict[str, Any]) -> dict[str, Any]:
    """`flags` with each field's former names (specs.option's aliases) read as the field."""
    flags = dict(flags)
    for f in own_fields:
        for alias in f.metadata.get("aliases", ()):
            value = flags.pop(_alias_parameter(f.name, alias), None)
            if value is not None:
                flags[f.name] = value
    return flags


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)  # fmt: skip


def _parsed(value: Any, kind: Any, spec_field: Any) -> Any:
    """A flag's value as the spec's field holds it."""
    if isinstance(value, Path):
        return str(value)  # specs are recorded in the results' JSON
    if typing.get_origin(kind) is tuple and isinstance(value, str):
        (item,) = {a for a in typing.get_args(kind) if a is not Ellipsis}
        flag = spec_field.metadata.get("flag") or f"--{spec_field.name.replace('_', '-')}"
        if item is str:
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return parse_numbers(value, flag, item)
    return value


def save_result(result: dict[str, Any], json_out: Path | None, **outputs: Any) -> None:
    from .output import save_results

    save_results(result, json_out=json_out, echo=typer.echo, **outputs)


def networks_or_standard(given: list[str] | None) -> tuple:
    """--network values, or the two reference networks when none is given."""
    from ..network.model import STANDARD_NETWORKS, parse_network

    return tuple(parse_network(n) for n in given) if given else STANDARD_NETWORKS
