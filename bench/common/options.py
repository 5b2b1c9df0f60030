"""Options and helpers that several `dane bench` commands share (app.py, app_network.py)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any

import typer

JsonOut = Annotated[Path | None, typer.Option("--json", help="Write the results here (JSON).")]
PlotOut = Annotated[Path | None, typer.Option("--plot", help="Write the figure here (PNG).")]
Workdir = Annotated[Path, typer.Option(help="Where stores and run directories go.")]
Store = Annotated[str, typer.Option(help="Store to train on (written by `dane prepare`).")]
Model = Annotated[str, typer.Option(help="Model.")]
LocalSteps = Annotated[int, typer.Option(help="Local steps K per round.")]
BatchSize = Annotated[int, typer.Option(help="Minibatch size per shard (per DDP rank).")]
GradSample = Annotated[int, typer.Option(help="DANE: gradient rows per shard; 0: all.")]
Seed = Annotated[int, typer.Option(help="Seed of data order and initial weights.")]
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


def spec_from_options(spec_type: type, options: dict[str, Any], **converted: Any) -> Any:
    """A bench spec from a command's options, by name (`converted`: those parsed first).

    Paths (--workdir) become strings: specs are recorded in the results' JSON.
    """
    names = {f.name for f in fields(spec_type)}
    given = {k: str(v) if isinstance(v, Path) else v for k, v in options.items() if k in names}
    return spec_type(**{**given, **converted})


def save_result(result: dict[str, Any], json_out: Path | None, **outputs: Any) -> None:
    from .output import save_results

    save_results(result, json_out=json_out, echo=typer.echo, **outputs)


def networks_or_standard(given: list[str] | None) -> tuple:
    """--network values, or the two reference networks when none is given."""
    from ..network.model import STANDARD_NETWORKS, parse_network

    return tuple(parse_network(n) for n in given) if given else STANDARD_NETWORKS
