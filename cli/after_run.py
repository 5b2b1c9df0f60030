"""The commands that read a run `dane train` wrote: evaluate, predict, export, report, watch.

Registered on the `dane` app by commands.py; each imports what it computes with only when
called, so `dane --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CHECKPOINT_HELP = (
    "best: the round the run selected (best.pt; the latest where it has none) | "
    "latest: the last round saved."
)
Checkpoint = Annotated[str, typer.Option(help=CHECKPOINT_HELP)]
RunDirArgument = Annotated[Path, typer.Argument(help="A run directory written by `dane train`.")]


def _which(checkpoint: str, best: bool | None) -> str:
    """--checkpoint checked, or the former --best/--no-best where given."""
    if best is not None:
        return "best" if best else "latest"
    if checkpoint not in ("best", "latest"):
        raise ValueError(f"unknown --checkpoint {checkpoint!r}; choose one of: best, latest")
    return checkpoint


def evaluate(
    run_dir: RunDirArgument,
    checkpoint: Checkpoint = "best",
    store: Annotated[
        str | None,
        typer.Option(
            help="Score on this store's test split instead of the run's own (samples of the "
            "run's shape and classes, normalised with the run's statistics)."
        ),
    ] = None,
    best: Annotated[bool | None, typer.Option("--best/--no-best", hidden=True)] = None,
) -> None:
    """Print loss and accuracy of a run's checkpoint (the best, as export) on a store's test
    split: the run's own, or --store."""
    from ..pipeline.predict import evaluate_checkpoint

    which = _which(checkpoint, best)
    path, round_index, metrics = evaluate_checkpoint(run_dir, best=which == "best", store=store)
    on = f" on {store}" if store else ""
    line = f"{path.name} (round {round_index}){on}: test loss {metrics['loss']:.4f}"
    if "accuracy" in metrics:
        line += f", test accuracy {metrics['accuracy']:.4f}"
    typer.echo(line)


def predict(
    run_dir: RunDirArgument,
    source: Annotated[
        Path,
        typer.Argument(
            metavar="FOLDER_OR_STORE",
            help="A folder of images (searched recursively; decoded to the run's channels and "
            "size) or a store (its test split).",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="The CSV file to write.")],
    checkpoint: Checkpoint = "best",
    force: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False,
) -> None:
    """Write the class a run's model gives each image of a folder (or row of a store) to a
    CSV file: file, class, probability."""
    from ..pipeline.predict import predict as predict_classes
    from ..pipeline.predict import write_predictions

    if out.exists() and not force:
        raise ValueError(
            f"{out} already exists; pass --force to replace it or choose another --out"
        )
    if not out.parent.is_dir():
        raise ValueError(f"folder {out.parent} does not exist; create it or choose another --out")
    rows = predict_classes(run_dir, source, checkpoint=_which(checkpoint, None))
    write_predictions(rows, out)
    typer.echo(f"wrote {out}: {len(rows)} prediction{'s' if len(rows) != 1 else ''}")


def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `dane train`.")],
    out: Annotated[Path, typer.Option("--out", help="The file to write (.pt2 or .pt).")],
    checkpoint: Annotated[
        str,
        typer.Option(
            help="best: the round the run selected (best.pt; the latest where it has none) | "
            "latest: the last round saved."
        ),
    ] = "best",
    best: Annotated[bool | None, typer.Option("--best/--no-best", hidden=True)] = None,
    format: Annotated[
        str,
        typer.Option(
            help="program: a torch.export program (torch.export.load(FILE).module(), no "
            "dask-dane needed; takes the samples as the store holds them, as float32) | "
            "state-dict: the module's state_dict. Either holds the class names, "
            "normalisation and round: the program in its extra file dask_dane.json, the "
            "state dict in keys beside it."
        ),
    ] = "program",
    force: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False,
) -> None:
    """Write a trained model to a file that plain PyTorch loads."""
    from ..pipeline.trained import export_checkpoint

    if out.exists() and not force:
        raise ValueError(
            f"{out} already exists; pass --force to replace it or choose another --out"
        )
    if best is not None:  # the former flag: --best, or --no-best for the latest
        checkpoint = "best" if best else "latest"
    written, chosen = export_checkpoint(run_dir, out, checkpoint=checkpoint, form=format)
    typer.echo(f"wrote {written} ({format}): {chosen.describe()}")


def report(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(metavar="RUN_DIR", help="Run directories written by `dane train`."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder for the PNG files.")],
) -> None:
    """Plot test accuracy and training loss of runs against round, communication and time,
    and print a table of the runs: best and final test accuracy, rounds, time, MB."""
    from ..pipeline.report import load_run, write_report
    from ..pipeline.report_table import table_lines

    written = write_report(list(run_dirs), out)  # checks every folder first
    for line in table_lines([str(p) for p in run_dirs], [load_run(p).rows for p in run_dirs]):
        typer.echo(line)
    for path in written:
        typer.echo(f"wrote {path}")


def watch_run(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (its metrics.jsonl).")],
    interval: Annotated[float, typer.Option(help="Seconds between reads of it.")] = 1.0,
    wait: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="How long to wait for a run folder that is not there yet (a `dane train` "
            "still starting) before giving up.",
        ),
    ] = 60.0,
) -> None:
    """Follow a run started elsewhere, live (round, loss and accuracy sparklines, bytes, the
    slowest worker, an ETA; a line a round where the output is not a terminal); exits when
    the run ends."""
    from .watch import watch

    if not interval > 0:
        raise ValueError(f"--interval must be a positive number of seconds (got {interval})")
    if not wait >= 0:
        raise ValueError(f"--wait must be 0 or more seconds (got {wait})")
    watch(run_dir, interval, wait)
