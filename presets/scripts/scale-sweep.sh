#!/usr/bin/env bash
# The defaults study's accuracy sweep: `preset:fashion-mnist-dane-scale` and its cures on m = 1 ... 32 iid
# shards of Fashion-MNIST, 10 rounds of one pass over a shard each, one `dane bench shards`
# per configuration, side by side (a GPU machine: every worker computes on the GPU it sees;
# each bench starts its own 2-worker LocalCluster):
#   fedexp          the shipped preset (FedExP's server step)
#   nesterov        DiLoCo's outer step: Nesterov momentum 0.9 at outer lr 0.7
#   nesterov05      Nesterov momentum 0.5 at outer lr 1 (10 outer steps build little momentum)
#   qsr             the preset with --local-steps-schedule qsr (K grows as the lr decays)
#   qsr-nesterov05  both
#   fedavg          FedAvg with the same local settings and server step
#   ddp-grid        DDP at m ranks, the best of the tuning grid from m = 8 (on the GPU)
#   fedexp-s1, -s2  the preset with seeds 1 and 2 (split and initial weights) at m = 1, 8, 16
#
#   bash presets/scripts/scale-sweep.sh [OUT] [--configs-only]
#
# OUT/cfg holds the configurations, OUT/<name>.json and .log each bench's result; the run
# directories (metrics.jsonl of every round) stay under OUT/<name>/runs even if a bench is
# stopped. Environment: ROUNDS (10), DEVICE (auto), SHARDS (1,2,4,8,16,32), SEED_SHARDS
# (1,8,16), LOCAL_EPOCHS (1), SIDE_BY_SIDE (1; 0 runs the benches one after another, as a
# 2-core machine must), FASHION_MNIST_DIR, PYTHON (the one that has dask_dane). Installs nothing.
set -uo pipefail
OUT=${1:-bench-out/scale-sweep}
ROUNDS=${ROUNDS:-10}
DEVICE=${DEVICE:-auto}
SHARDS=${SHARDS:-1,2,4,8,16,32}
SEED_SHARDS=${SEED_SHARDS:-1,8,16}
LOCAL_EPOCHS=${LOCAL_EPOCHS:-1}
SIDE_BY_SIDE=${SIDE_BY_SIDE:-1}
# The Python that has dask_dane: $PYTHON if set, else python3 where it imports dask_dane (an
# activated venv, a pip install), else this checkout's .venv, which `make setup` creates: a
# bare python3 outside an activated venv lacks the package.
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import dask_dane' 2>/dev/null || PYTHON="$(dirname "$0")/../../.venv/bin/python"
DANE=("$PYTHON" -m dask_dane.cli)
FMNIST=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
CFG="$OUT/cfg"
mkdir -p "$CFG"

# Every configuration is the preset with the settings a sweep varies replaced.
BASE=$("${DANE[@]}" presets --path fashion-mnist-dane-scale) || exit 2
base() {
  grep -v -E '^(#|rounds|workers|device|dashboard_address|local_clip) ' "$BASE" | grep -v '^#'
  printf 'rounds = %s\nworkers = 2\ndevice = "%s"\n' "$ROUNDS" "$DEVICE"
  printf 'dashboard_address = "127.0.0.1:0"\nlocal_clip = 0.0\n'
}
without() { grep -v -E "^($1) "; }
nesterov() { printf 'server_lr = %s\nserver_momentum = %s\nserver_nesterov = true\n' "$1" "$2"; }
base >"$CFG/fedexp.toml"
(base | without server_lr_rule; nesterov 0.7 0.9) >"$CFG/nesterov.toml"
(base | without server_lr_rule; nesterov 1.0 0.5) >"$CFG/nesterov05.toml"
(base; echo 'local_steps_schedule = "qsr"') >"$CFG/qsr.toml"
(base | without server_lr_rule; nesterov 1.0 0.5; echo 'local_steps_schedule = "qsr"') \
  >"$CFG/qsr-nesterov05.toml"
(base | without 'algorithm|grad_sample|correction'; echo 'algorithm = "fedavg"') \
  >"$CFG/fedavg.toml"
for seed in 1 2; do (base | without seed; echo "seed = $seed") >"$CFG/fedexp-s$seed.toml"; done
[ "${2:-}" = --configs-only ] && exit 0

# One store per m, written once and shared by the benches of seed 0 (a bench reuses a store
# that exists); the seeded benches write their own.
for m in ${SHARDS//,/ }; do
  store="$OUT/stores/fashion-mnist-iid-$m.zarr"
  [ -e "$store" ] || "${DANE[@]}" prepare fashion-mnist --path "$FMNIST" --shards "$m" \
    --out "$store" || exit 1
done
bench() {  # NAME SHARED_STORES(yes|no) FLAGS...
  local name=$1 shared=$2 started=$SECONDS
  shift 2
  mkdir -p "$OUT/$name"
  if [ "$shared" = yes ]; then ln -sfn "$(cd "$OUT" && pwd)/stores" "$OUT/$name/stores"; fi
  "${DANE[@]}" bench shards --workdir "$OUT/$name" --target 0.88 \
    --local-epochs "$LOCAL_EPOCHS" --json "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - started)) s" | tee -a "$OUT/status.txt"
}
launch() { if [ "$SIDE_BY_SIDE" = 1 ]; then "$@" & else "$@"; fi; }
for name in fedexp nesterov nesterov05 qsr qsr-nesterov05 fedavg; do
  launch bench "$name" yes --config "$CFG/$name.toml" --shards "$SHARDS" --no-ddp
done
launch bench ddp-grid yes --config "$CFG/fedexp.toml" --shards "$SHARDS" --no-dane \
  --ddp-grid-from 8
for seed in 1 2; do
  launch bench "fedexp-s$seed" no --config "$CFG/fedexp-s$seed.toml" --shards "$SEED_SHARDS" \
    --no-ddp --seed "$seed"
done
wait
cat "$OUT/status.txt"
