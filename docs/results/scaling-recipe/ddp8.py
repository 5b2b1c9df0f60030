"""DDP at 8 ranks (batch 512) at the recipe's 5-pass budget: three settings of the DDP grid
(bench/training/ddp_rows.py has twelve), the best chosen by final training loss as ddp_rows
does. Run from the checkout's root once the m = 8 sweep has written its store:
    python docs/results/scaling-recipe/ddp8.py
"""

import json
from pathlib import Path

from dask_dane.bench.ddp.single import run_single
from dask_dane.bench.training import ddp_rows
from dask_dane.pipeline import RunConfig, read_toml

HERE = Path("docs/results/scaling-recipe")
STORE = "bench-out/recipe/stores/fashion-mnist-iid-8.zarr"
SETTINGS = (
    {"scaling": "sqrt", "warmup": 1.0, "lr_factor": 1.0},
    {"scaling": "sqrt", "warmup": 1.0, "lr_factor": 2.0},
    {"scaling": "linear", "warmup": 1.0, "lr_factor": 0.5},
)


def main() -> None:
    config = RunConfig(**{**read_toml(HERE / "win.toml"), "store": STORE})
    rows, epochs, found = 60_000, 5.0, []
    for setting in SETTINGS:
        spec = ddp_rows.ddp_spec(config, 8, epochs, rows, 0, **setting)
        result = run_single(spec, log=lambda line: None)
        row = {**ddp_rows._row(spec, 8, rows, 0.88, result), **setting}
        row["final_train_loss"] = ddp_rows.final_train_loss(result)
        print({k: v for k, v in row.items() if not isinstance(v, (list, dict))}, flush=True)
        found.append(row)
    (HERE / "ddp8.json").write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
