#!/usr/bin/env bash
# The CNN benchmarks of docs/results/cnn-accuracy/first-runs.md: Fashion-MNIST stores, then the runs of
# presets/replays/cnn-*.toml, one `dane bench train` per file, the files side by side (each its own
# cluster; on one GPU they share it; on a CPU-only machine run them one at a time instead).
# Results: JSON_DIR/<file>.json, run directories and logs under bench-out/cnn/<file>/.
#
#   bash presets/scripts/cnn-benchmarks.sh [FASHION_MNIST_DIR] [SECONDS_PER_FILE] [JSON_DIR]
set -uo pipefail
FMNIST=${1:-/usr/share/datasets/fashion-mnist}
LIMIT=${2:-3000}
RESULTS=${3:-bench-out/cnn}
# The Python that has dask_dane: $PYTHON if set, else python3 where it imports dask_dane (an
# activated venv, a pip install), else this checkout's .venv, which `make setup` creates: a
# bare python3 outside an activated venv lacks the package.
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import dask_dane' 2>/dev/null || PYTHON="$(dirname "$0")/../../.venv/bin/python"
DANE=("$PYTHON" -m dask_dane.cli)
S=bench-out/stores
mkdir -p "$S" bench-out/cnn "$RESULTS"
"${DANE[@]}" prepare fashion-mnist --path "$FMNIST" --shards 4 --out $S/fmnist-iid-4.zarr --force
"${DANE[@]}" prepare fashion-mnist --path "$FMNIST" --shards 8 --out $S/fmnist-iid-8.zarr --force
# 4 shards x 2 classes would leave 2 of the 10 labels on no shard: 3 classes per shard there.
"${DANE[@]}" prepare fashion-mnist --path "$FMNIST" --shards 4 --partition label-skew \
  --classes-per-shard 3 --out $S/fmnist-label-skew-4.zarr --force
"${DANE[@]}" prepare fashion-mnist --path "$FMNIST" --shards 8 --partition label-skew \
  --classes-per-shard 2 --out $S/fmnist-label-skew-8.zarr --force
# The presets travel inside the package: ask dane where they are, so a pip install works too.
PRESETS=$("${DANE[@]}" presets --dir)/replays
for file in "$PRESETS"/cnn-*.toml; do
  name=$(basename "$file" .toml)
  timeout "$LIMIT" "${DANE[@]}" bench train --config "$file" --json "$RESULTS/$name.json" \
    --workdir "bench-out/cnn/$name" > "bench-out/cnn/$name.log" 2>&1 &
done
wait
tail -n 3 bench-out/cnn/*.log
