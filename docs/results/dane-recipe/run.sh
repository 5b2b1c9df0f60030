#!/usr/bin/env bash
# The ablation of DANE's scaling recipe at m = 8 (docs/results/dane-recipe.md): each TOML here
# through `dane bench shards`, one after another, 3 passes over Fashion-MNIST, no DDP rows.
# Usage: bash docs/results/dane-recipe/run.sh [NAME ...]   (default: every TOML here)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
names=("$@"); [ ${#names[@]} -gt 0 ] || names=($(cd "$here" && ls *.toml | sed 's/.toml$//'))
for name in "${names[@]}"; do
  # A run that diverges is a result too: say so and go on to the next.
  dane bench shards --config "$here/$name.toml" --shards "${SHARDS:-8}" --no-ddp --target 0.88 \
    --workdir "${WORKDIR:-bench-out/dane-recipe}" --json "$here/$name.json" \
    || echo "$name: failed (exit $?)" | tee "$here/$name.failed"
done
