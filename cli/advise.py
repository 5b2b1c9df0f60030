"""`dane advise`: how many workers pay, from the gradient noise scale (pipeline/advise.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Store = Annotated[
    str | None,
    typer.Argument(help="A store written by `dane prepare`; none: the embedded digits default."),
]
Given = Annotated[int | None, typer.Option(help="As dane train's (its default if not given).")]


def advise(
    store: Store = None,
    model: Annotated[str | None, typer.Option(help="As dane train's --model.")] = None,
    batch_size: Given = None,
    local_lr: Annotated[
        float | None, typer.Option(help="As dane train's; the rate of the --steps.")
    ] = None,
    seed: Given = None,
    draws: Annotated[int, typer.Option(help="Rounds of minibatch gradients averaged.")] = 8,
    steps: Annotated[
        int, typer.Option(help="SGD steps before measuring (0: at the initial weights).")
    ] = 0,
    json: Annotated[Path | None, typer.Option("--json", help="Also write the advice here.")] = None,
) -> None:
    """Measure the gradient noise scale in one process and predict, for 1 to 16 workers of
    --batch-size rows each, the steps to a target and the largest worker count worth paying
    (no more than the store's training rows support)."""
    from json import dumps

    from ..pipeline.advise import advice_lines, advise
    from ..pipeline.setup.config import RunConfig

    given = dict(model=model, batch_size=batch_size, local_lr=local_lr, seed=seed)
    config = RunConfig(store=store, **{k: v for k, v in given.items() if v is not None})
    advice = advise(config.validate(), draws=draws, steps=steps)
    for line in advice_lines(advice):
        typer.echo(line)
    if json is not None:
        json.write_text(dumps(advice, indent=2) + "\n")
        typer.echo(f"wrote {json}")
