"""The terminal during `dane train`: the cluster's own logs go to the run directory."""

from __future__ import annotations

import logging

import pytest

from dask_dane.cli.console import quiet_cluster_logs


def test_cluster_logs_go_to_the_run_directory_not_the_terminal(tmp_path, capsys, monkeypatch):
    # Tornado's logger as a process that has not configured distributed's logging has it
    # (conftest.py imports distributed, whose logging setup turns propagation off).
    monkeypatch.setattr(logging.getLogger("tornado"), "propagate", True)
    run = tmp_path / "run"
    with quiet_cluster_logs(run):
        # Before the run directory exists (the run is still being checked): held, not written.
        logging.getLogger("distributed.dane_test").error("early")
        assert not run.exists()
        run.mkdir()
        try:
            raise AssertionError("a browser closed the page")
        # What Bokeh logged when a dashboard page closed; CRITICAL, as a cluster started here
        # sets Tornado's loggers to that level (lower ones are dropped before any handler).
        except AssertionError:
            logging.getLogger("tornado.dane_test").critical("Uncaught exception", exc_info=True)
        logging.getLogger("bokeh.dane_test").error("late")

    text = (run / "cluster.log").read_text()
    assert text.index("early") < text.index("a browser closed the page") < text.index("late")
    assert "Traceback" in text
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    # Afterwards the loggers are as they were.
    assert logging.getLogger("tornado").propagate is True  # restored


def test_a_run_refused_before_it_starts_leaves_no_log_file(tmp_path):
    with quiet_cluster_logs(tmp_path / "never"):
        logging.getLogger("distributed").error("nobody reads this")
    assert not (tmp_path / "never").exists()


@pytest.mark.cluster
def test_a_started_clusters_workers_log_to_the_file_not_the_terminal(tmp_path, capfd):
    from dask_dane.pipeline.launchers.cluster import make_client
    from dask_dane.pipeline.setup.settings import ClusterSettings

    settings = ClusterSettings(workers=1, dashboard_address="127.0.0.1:0")
    log = tmp_path / "run" / "cluster.log"

    def worker_error() -> str:  # runs in the worker process, as its own records would
        logging.getLogger("distributed.worker").error("worker-marker: a task failed")
        return "logged"

    with make_client(settings, worker_log=log) as client:
        assert list(client.run(worker_error).values()) == ["logged"]

    captured = capfd.readouterr()  # fd 2 of this process, which the worker inherited
    assert "worker-marker" not in captured.err + captured.out
    assert "worker-marker: a task failed" in log.read_text()


def test_the_bar_ends_at_the_rounds_the_run_kept(tmp_path):
    # Ctrl-C after round 3's row was written but before its callback: the bar's last frame
    # says 3, as the interrupt line (train_lines.interrupted_line) does.
    import json

    from dask_dane.cli.console import TrainingProgress
    from dask_dane.pipeline.setup.config import RunConfig

    out = tmp_path / "run"
    out.mkdir()
    rows = [{"round": t, "train_loss": 1.0 / t, "test_accuracy": 0.5} for t in (1, 2, 3)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    progress = TrainingProgress(RunConfig(out=str(out), rounds=10))
    with progress:
        progress.bar.start()
        for row in rows[:2]:
            progress.on_round(row)
        assert progress.bar.tasks[0].completed == 2
    assert progress.bar.tasks[0].completed == 3
