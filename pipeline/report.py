"""`dane report`: test accuracy and training loss of one or more runs, drawn as PNG.

Each figure has four panels, the same quantity against the round, the communication rounds
(DANE's two phases count two), the cumulative bytes moved and the cumulative wall time, so runs
of different algorithms compare on the axis that matters to the reader. Every run is one line,
labelled with its algorithm and the settings that distinguish it (from its config.toml). A
resumed run is labelled with the settings it started with, and each setting a resume changed
with its new value and the first round that ran with it: "lr=0.05 (0.1 from round 4)".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from .engine.run.rundir import RunDir
from .setup.config import RunConfig
from .setup.resumed import Resume, RunRecord
from .setup.run_file import run_record

# (metrics field, axis title, file name)
QUANTITIES = (
    ("test_accuracy", "test accuracy", "test_accuracy.png"),
    ("train_loss", "training loss", "train_loss.png"),
    # Drawn where a run measured it (DANE, sync SGD; algorithms/parts/noise_scale.py): the
    # batch beyond which more workers hardly shorten training, as the run goes.
    ("noise_scale_ema", "gradient noise scale (rows, smoothed)", "noise_scale.png"),
)
LOG_SCALED = ("train_loss", "noise_scale_ema")
# (x values from the rows, axis title)
AXES = ("round", "communication rounds", "communication (MB)", "wall time (s)")


@dataclass(frozen=True, kw_only=True)
class RunCurves:
    """One run as the report sees it: its label and its metrics rows."""

    label: str
    rows: list[dict[str, Any]]


def load_run(path: str | Path) -> RunCurves:
    """Read a run directory's config.toml and metrics.jsonl; ValueError if it is not one."""
    from ..datasets.store.mistaken import is_store, store_not_run

    run = RunDir(Path(path))
    if is_store(run.root):
        raise ValueError(store_not_run(path))
    if not run.config.exists() or not run.metrics.exists():
        raise ValueError(
            f"{run.root} is not a run directory (it needs config.toml and metrics.jsonl); pass "
            "the --out folder of a `dane train` run"
        )
    rows = run.rows()
    if not rows:
        raise ValueError(f"{run.root} has no completed round yet; train it first")
    record = run_record(run)
    return RunCurves(label=run_label(record.original, record.resumes), rows=rows)


def run_label(settings: dict[str, Any], resumes: Sequence[Resume] = ()) -> str:
    """The algorithm's own label (its key settings) and the store, e.g. 'dane mu=0 K=50 ...'.

    `settings` are a run's saved settings (config.toml); missing ones take their defaults.
    `resumes` (config.toml's [[resumed]]) mark what changed from which round on.
    """
    labels = [_label(settings)]
    for number in range(1, len(resumes) + 1):
        labels.append(_label(RunRecord(settings, tuple(resumes[:number])).effective))
    return _annotated(labels, [resume.after_round + 1 for resume in resumes])


def _annotated(labels: list[str], starts: list[int]) -> str:
    """The first label, each word that a later label changes followed by the new words and
    the round they start: 'lr=0.05 (0.1 from round 4)'. Words are matched by their key (the
    text before '='), so a changed value is shown beside the one it replaced."""
    words = labels[0].split(" ")
    notes: dict[int, list[str]] = {}  # index into words (len(words): added words) -> notes
    last = {_key(word): word for word in words}
    for label, start in zip(labels[1:], starts, strict=True):
        now = {_key(word): word for word in label.split(" ")}
        for key in [*last, *(k for k in now if k not in last)]:
            before, after = last.get(key), now.get(key)
            if before == after:
                continue
            at = next((i for i, w in enumerate(words) if _key(w) == key), len(words))
            value = "off" if after is None else after.split("=", 1)[-1]
            notes.setdefault(at, []).append(f"{value} from round {start}")
        last = now
    pieces = [w + (f" ({', '.join(notes[i])})" if i in notes else "") for i, w in enumerate(words)]
    if len(words) in notes:
        pieces.append(f"({', '.join(notes[len(words)])})")
    return " ".join(pieces)


def _key(word: str) -> str:
    return word.split("=", 1)[0]


def _label(settings: dict[str, Any]) -> str:
    config = RunConfig(**settings)
    label = config.strategy.label()
    # Settings the strategy's label leaves out (augment: the objective's own), shown away from
    # their defaults: runs differing only by one of them must differ.
    for key in ("augment", "precision", "transport"):
        if getattr(config, key) != getattr(RunConfig, key):
            label += f" {key}={getattr(config, key)}"
    return f"{label} [{Path(config.store).stem}]" if config.store else label


def _x_values(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    return {
        "round": [row["round"] for row in rows],
        "communication rounds": [row["comm_rounds"] for row in rows],
        "communication (MB)": [row["cum_comm_bytes"] / 1e6 for row in rows],
        "wall time (s)": list(accumulate(row["wall_s"] for row in rows)),
    }


def selected_round(rows: list[dict[str, Any]]) -> int | None:
    """Index of the row of the selected model (best.pt): the last row marked is_best."""
    marked = [i for i, row in enumerate(rows) if row.get("is_best")]
    return marked[-1] if marked else None


def write_report(run_dirs: list[str | Path], out: str | Path) -> list[Path]:
    """Draw every quantity of QUANTITIES for the runs into `out`; returns the PNG paths.

    Parameters
    ----------
    run_dirs
        Run directories written by `dane train` (each needs config.toml and metrics.jsonl).
    out
        Folder for the PNG files (created if missing).

    Returns
    -------
    list of Path
        The files written: test_accuracy.png and train_loss.png, the selected round (the
        one best.pt holds) marked with a star on each run's curves; noise_scale.png too
        where a run holds a gradient noise scale.
    """
    plt = pyplot()

    if not run_dirs:
        raise ValueError("no run directories given; pass one or more `dane train --out` folders")
    runs = [load_run(path) for path in run_dirs]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for field, title, name in QUANTITIES:
        if not any(row.get(field) is not None for run in runs for row in run.rows):
            continue  # runs older than the field, or algorithms that do not measure it
        fig, panels = plt.subplots(1, len(AXES), figsize=(4.2 * len(AXES), 3.6), sharey=True)
        for run in runs:
            xs = _x_values(run.rows)
            kept = [i for i, row in enumerate(run.rows) if row.get(field) is not None]
            ys = [run.rows[i][field] for i in kept]
            best = selected_round(run.rows)
            for panel, axis in zip(panels, AXES, strict=True):
                (line,) = panel.plot([xs[axis][i] for i in kept], ys, marker=".", label=run.label)
                if best is not None and run.rows[best].get(field) is not None:
                    # The selected model (best.pt): a star in the run's colour.
                    x, y = xs[axis][best], run.rows[best][field]
                    panel.plot([x], [y], marker="*", markersize=12, color=line.get_color())
        for panel, axis in zip(panels, AXES, strict=True):
            panel.set_xlabel(axis)
            panel.grid(alpha=0.3)
        panels[0].set_ylabel(title)
        if field in LOG_SCALED:
            _log_scale(panels[0], [row.get(field) for run in runs for row in run.rows])
        handles, labels = panels[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(2, len(runs)), fontsize=8)
        fig.suptitle(f"{title} of {len(runs)} run{'s' if len(runs) > 1 else ''}")
        # Room at the bottom for the legend, one line per two runs.
        fig.tight_layout(rect=(0, 0.06 + 0.045 * ((len(runs) + 1) // 2), 1, 1))
        path = out / name
        save_figure(fig, path, dpi=90)
        written.append(path)
    return written


def _log_scale(panel: Any, values: list[float | None]) -> None:
    """A log axis; symlog where a value is 0 or below (a loss of exactly 0: a log axis drops
    the point), linear from 0 up to the smallest positive value and log above it, so that
    the positive values keep the log axis's spacing."""
    shown = [v for v in values if v is not None]
    if all(v > 0 for v in shown):
        panel.set_yscale("log")
        return
    positive = [v for v in shown if v > 0]
    panel.set_yscale("symlog", linthresh=min(positive, default=1.0))


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only (no display needed); imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int = 110) -> None:
    """Write a figure (its folder made if need be) and free it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
