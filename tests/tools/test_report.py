"""`dane report`: valid PNG files of non-trivial size, one line per run, readable labels."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dask_dane.cli.commands import app
from dask_dane.pipeline.report import load_run, run_label, write_report
from dask_dane.pipeline.setup.config import RunConfig, to_toml

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _fake_run(root: Path, name: str, config: RunConfig, *, rounds: int = 12) -> Path:
    """A run directory as `dane train` leaves it, with made-up but plausible metrics."""
    path = root / name
    path.mkdir(parents=True)
    (path / "config.toml").write_text(to_toml(config))
    phases = 2 if config.algorithm == "dane" else 1
    rows = [
        {
            "round": t,
            "algorithm": config.algorithm,
            "train_loss": 2.3 / t,
            "test_loss": 2.0 / t,
            "test_accuracy": None if t % 3 else 1 - 0.9 / t,  # evaluated every 3rd round
            "grad_norm": 1.0 / t,
            "wall_s": 0.5 + 0.1 * phases,
            "max_worker_compute_s": 0.4,
            "comm_bytes": 1000 * phases,
            "cum_comm_bytes": 1000 * phases * t,
            "comm_rounds": phases * t,
        }
        for t in range(1, rounds + 1)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_writes_valid_pngs_of_every_run(tmp_path):
    runs = [
        _fake_run(tmp_path, "dane", RunConfig(algorithm="dane", mu=0.1, safeguard="backtrack")),
        _fake_run(tmp_path, "fedavg", RunConfig(algorithm="fedavg", local_steps=20)),
        _fake_run(tmp_path, "sgd", RunConfig(algorithm="sgd", batch_size=64)),
    ]

    written = write_report(runs, tmp_path / "plots")

    assert [p.name for p in written] == ["test_accuracy.png", "train_loss.png"]
    for path in written:
        width, height = _png_size(path)
        assert 800 <= width <= 3000 and 200 <= height <= 1500
        assert width > height  # four panels side by side
        assert path.stat().st_size > 10_000  # real lines and text, not an empty canvas


def test_each_panel_draws_one_line_per_run_through_its_metrics(tmp_path, monkeypatch):
    from dask_dane.pipeline import report

    figures = {}
    monkeypatch.setattr(
        report, "save_figure", lambda fig, path, dpi: figures.update({path.name: fig})
    )
    configs = {
        "dane": RunConfig(algorithm="dane", mu=0.1),
        "fedavg": RunConfig(algorithm="fedavg", local_steps=20),
    }
    runs = [_fake_run(tmp_path, name, config) for name, config in configs.items()]

    report.write_report(runs, tmp_path / "plots")

    accuracy = figures["test_accuracy.png"]
    by_round, by_comm_rounds = accuracy.axes[0], accuracy.axes[1]
    assert len(accuracy.axes) == 4 and all(len(panel.lines) == 2 for panel in accuracy.axes)
    dane, fedavg = by_round.lines
    assert dane.get_label().startswith("dane eta=1 mu=0.1")
    assert fedavg.get_label().startswith("fedavg K=20")
    # Evaluated every 3rd round: accuracy 1 - 0.9 / t at t = 3, 6, 9, 12.
    assert list(dane.get_xdata()) == [3, 6, 9, 12]
    assert list(dane.get_ydata()) == pytest.approx([1 - 0.9 / t for t in (3, 6, 9, 12)])
    # DANE's round is two communication rounds, FedAvg's one.
    assert list(by_comm_rounds.lines[0].get_xdata()) == [6, 12, 18, 24]
    assert list(by_comm_rounds.lines[1].get_xdata()) == [3, 6, 9, 12]
    loss = figures["train_loss.png"].axes[0]
    assert [len(line.get_xdata()) for line in loss.lines] == [12, 12]  # every round
    assert loss.get_yscale() == "log"


def test_labels_name_the_algorithm_and_its_key_settings():
    dane = run_label(
        RunConfig(algorithm="dane", mu=0.5, safeguard="adaptive-mu", grad_sample=1000).as_dict()
    )
    fedprox = run_label(RunConfig(algorithm="fedprox", mu=0.01, local_steps=50).as_dict())

    assert dane.startswith(
        "dane eta=1 mu=0.5 safeguard=adaptive-mu grad-sample=1000 theta=0.3 K=30"
    )
    assert fedprox.startswith("fedprox mu=0.01 K=50 lr=0.05 clip=1 B=32")


def test_cli_report_writes_files_and_rejects_a_folder_that_is_no_run(tmp_path):
    run = _fake_run(tmp_path, "run", RunConfig(algorithm="dane"))
    (tmp_path / "empty").mkdir()

    ok = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "plots")])
    with pytest.raises(ValueError, match="not a run directory"):
        load_run(tmp_path / "empty")

    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "plots" / "test_accuracy.png").stat().st_size > 10_000
    assert "wrote" in ok.output


def test_the_selected_round_is_starred_on_its_run_s_curves(tmp_path, monkeypatch):
    from dask_dane.pipeline import report

    figures = {}
    monkeypatch.setattr(
        report, "save_figure", lambda fig, path, dpi: figures.update({path.name: fig})
    )
    path = _fake_run(tmp_path, "fedavg", RunConfig(algorithm="fedavg"))
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for row in rows:  # best.pt took rounds 3 and 6; round 6 is the selected model
        row["is_best"] = row["round"] in (3, 6)
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

    report.write_report([path], tmp_path / "plots")

    curve, star = figures["test_accuracy.png"].axes[0].lines
    assert (list(star.get_xdata()), star.get_marker()) == ([6], "*")
    assert list(star.get_ydata()) == pytest.approx([1 - 0.9 / 6])
    assert star.get_color() == curve.get_color()
    loss_star = figures["train_loss.png"].axes[0].lines[1]
    assert list(loss_star.get_xdata()) == [6]  # every quantity's curve marks it


def test_report_draws_the_noise_scale_where_a_run_measured_it(tmp_path, monkeypatch):
    from dask_dane.pipeline import report

    figures = {}
    monkeypatch.setattr(
        report, "save_figure", lambda fig, path, dpi: figures.update({path.name: fig})
    )
    # prepare: a DANE run whose rows hold the smoothed noise scale, a FedAvg run without
    dane = _fake_run(tmp_path, "dane", RunConfig(algorithm="dane"), rounds=4)
    rows = [json.loads(line) for line in (dane / "metrics.jsonl").open()]
    for row in rows:
        row["noise_scale_ema"] = 50.0 * row["round"]
    (dane / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    fedavg = _fake_run(tmp_path, "fedavg", RunConfig(algorithm="fedavg"), rounds=4)
    # act
    written = report.write_report([dane, fedavg], tmp_path / "plots")
    alone = report.write_report([fedavg], tmp_path / "alone")
    # assert: a third figure where a run measured it; the DANE curve holds its values, the
    # FedAvg one (kept for the colours to match the other figures) none
    assert [p.name for p in written] == ["test_accuracy.png", "train_loss.png", "noise_scale.png"]
    by_round = figures["noise_scale.png"].axes[0]
    dane_line, fedavg_line = by_round.lines
    assert list(dane_line.get_ydata()) == [50.0, 100.0, 150.0, 200.0]
    assert len(fedavg_line.get_xdata()) == 0 and by_round.get_yscale() == "log"
    assert [p.name for p in alone] == ["test_accuracy.png", "train_loss.png"]


def test_a_loss_of_exactly_0_is_drawn_inside_the_panel(tmp_path, monkeypatch):
    from dask_dane.pipeline import report

    figures = {}
    monkeypatch.setattr(
        report, "save_figure", lambda fig, path, dpi: figures.update({path.name: fig})
    )
    path = _fake_run(tmp_path, "fedavg", RunConfig(algorithm="fedavg"), rounds=4)
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    rows[-1]["train_loss"] = 0.0  # a model that fits every training row
    (path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

    report.write_report([path], tmp_path / "plots")

    panel = figures["train_loss.png"].axes[0]
    panel.figure.canvas.draw()
    (line,) = panel.lines
    points = panel.transData.transform(line.get_xydata())
    box = panel.get_window_extent()
    # Before: a log axis put the 0 at minus infinity, off the panel.
    assert all(box.y0 - 1 <= y <= box.y1 + 1 for _, y in points), points
    assert points[-1][1] < min(y for _, y in points[:-1])  # the 0 lowest, as it is
    assert panel.get_yscale() == "symlog"  # log above the smallest loss, as documented


def test_cli_report_prints_a_table_of_the_runs_and_a_plain_usage_line(tmp_path, dane_here):
    dane = _fake_run(tmp_path, "dane", RunConfig(algorithm="dane"))
    _fake_run(tmp_path, "fedavg", RunConfig(algorithm="fedavg"), rounds=6)
    rows = [json.loads(line) for line in (dane / "metrics.jsonl").read_text().splitlines()]
    for row in rows:  # best.pt holds round 6, though round 12 scored higher on test
        row["is_best"] = row["round"] == 6
    (dane / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))

    done = dane_here("report", "dane", "fedavg", "--out", "plots", cwd=tmp_path)
    usage = dane_here("report", "--help", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "run     rounds  best.pt acc (round)  final acc   time    MB",
        "dane        12           0.8500 (6)     0.9250  8.4 s  0.02",
        "fedavg       6           0.8500 (6)     0.8500  3.6 s  0.01",
        "wrote plots/test_accuracy.png",
        "wrote plots/train_loss.png",
    ]
    assert usage.stdout.splitlines()[0].endswith(" report [OPTIONS] RUN_DIR...")  # not {run_dirs}
