#!/usr/bin/env bash
# The skewed partitions of the skewed-shards study, for Fashion-MNIST and MNIST-1D:
#   Dirichlet alpha 0.1, 0.3 and 0.5 over 8 and 10 shards (Hsu et al. 2019), and 2 and 3
#   classes per shard over 10 shards (10 x 2 and 10 x 3 pieces: every label is on a shard).
# Each store: OUT/<dataset>-<partition>-<shards>.zarr, e.g. fmnist-dir0.5-8.zarr,
# mnist1d-cls2-10.zarr. `dane info STORE` shows each shard's label histogram.
#
#   bash presets/scripts/skew-stores.sh [OUT] [FASHION_MNIST_DIR]
set -euo pipefail
OUT=${1:-bench-out/stores}
FMNIST=${2:-/usr/share/datasets/fashion-mnist}
# The Python that has dask_dane: $PYTHON if set, else python3 where it imports dask_dane (an
# activated venv, a pip install), else this checkout's .venv, which `make setup` creates: a
# bare python3 outside an activated venv lacks the package.
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import dask_dane' 2>/dev/null || PYTHON="$(dirname "$0")/../../.venv/bin/python"
DANE=("$PYTHON" -m dask_dane.cli)
mkdir -p "$OUT"
prepare() {  # NAME SOURCE ARGS...
  local name=$1 source=$2
  shift 2
  [ -e "$OUT/$name.zarr" ] && return 0
  "${DANE[@]}" prepare "$source" --out "$OUT/$name.zarr" "$@"
}
for dataset in fmnist mnist1d; do
  if [ "$dataset" = fmnist ]; then
    source=(fashion-mnist --path "$FMNIST")
  else
    source=(mnist-1d --samples 5000)
  fi
  for shards in 8 10; do
    for alpha in 0.1 0.3 0.5; do
      prepare "$dataset-dir$alpha-$shards" "${source[@]}" --shards "$shards" \
        --partition dirichlet --alpha "$alpha"
    done
  done
  for classes in 2 3; do
    prepare "$dataset-cls$classes-10" "${source[@]}" --shards 10 --partition label-skew \
      --classes-per-shard "$classes"
  done
done
