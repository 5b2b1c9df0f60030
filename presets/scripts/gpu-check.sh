#!/usr/bin/env bash
# One short check of a GPU machine (or any machine): correctness on the GPU against the CPU
# reference, strong scaling on the CPU cores (1, 2, 4, 8 workers, capped at the cores there
# are) and on the GPUs (LocalCUDACluster, one worker per GPU), and one process's step in fp32
# and bf16. Installs nothing from the network; prints a table last; finishes within 8 minutes
# on one H200 with 16 cores.
#
#   bash presets/scripts/gpu-check.sh [OUT_DIR]        (default: bench-out/gpu-check)
#
# Data: Fashion-MNIST from $FASHION_MNIST_DIR, else the Debian package's folder, else the
# synthetic 28x28 source. `dane` is run as `python -m dask_dane.cli` so that a checkout put
# on PYTHONPATH (no pip install) works too.
set -uo pipefail
OUT=${1:-bench-out/gpu-check}
mkdir -p "$OUT"
# The Python that has dask_dane: $PYTHON if set, else python3 where it imports dask_dane (an
# activated venv, a pip install), else this checkout's .venv, which `make setup` creates: a
# bare python3 outside an activated venv lacks the package.
PYTHON=${PYTHON:-python3}
"$PYTHON" -c 'import dask_dane' 2>/dev/null || PYTHON="$(dirname "$0")/../../.venv/bin/python"
DANE=("$PYTHON" -m dask_dane.cli)
CORES=$("$PYTHON" -c 'import os; print(os.cpu_count())')
GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
echo "machine: $CORES CPU cores, $GPUS GPU(s)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" - <<'PY'
import importlib
for name in ("torch", "dask", "distributed", "zarr", "dask_cuda"):
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as err:  # dask_cuda is optional: LocalCluster shares the GPUs then
        print(f"{name}: not importable ({type(err).__name__}: {err})")
PY

FMNIST=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
STORE="$OUT/images-8.zarr"
if [ -d "$FMNIST" ]; then
  "${DANE[@]}" prepare fashion-mnist --path "$FMNIST" --shards 8 --out "$STORE" --force
else
  "${DANE[@]}" prepare synthetic --samples 20000 --image-size 28 --shards 8 --out "$STORE" --force
fi

# 1. Correctness on the GPU: DANE with exact local solves on logistic regression, through
#    Dask with the shards on the GPU, against the single-process reference on the CPU.
if [ "$GPUS" -gt 0 ]; then
  timeout 90 "${DANE[@]}" bench gpu-correctness --json "$OUT/correctness.json" \
    || echo "GPU correctness check failed (exit $?)"
  # The torch collective's sums on the GPUs, through NCCL, against the CPU's tree: bit for
  # bit (one rank a GPU; the checkout's tests).
  timeout 120 "$PYTHON" -m pytest -q -p no:randomly tests/engine/round/test_exchange.py -k cuda \
    > "$OUT/exchange-gpu.txt" 2>&1 || echo "GPU exchange check failed: see $OUT/exchange-gpu.txt"
fi

# 2. One process's local step in fp32 and in bf16 (--precision bf16: autocast, float32 weights).
DEVICE=cpu; [ "$GPUS" -gt 0 ] && DEVICE=cuda
timeout 60 "${DANE[@]}" bench precision --store "$STORE" --model lenet --device "$DEVICE" \
  --steps 100 --json "$OUT/precision.json" > "$OUT/precision.txt" 2> "$OUT/precision.err" \
  || echo "precision timing failed (exit $?): see $OUT/precision.err"

# 3. Strong scaling on the CPU cores: workers 1, 2, 4, 8 (at most the cores), one thread each.
WORKERS=$("$PYTHON" -c "print(','.join(str(w) for w in (1, 2, 4, 8) if w <= $CORES))")
timeout 200 "${DANE[@]}" bench scaling --store "$STORE" --model lenet --shards 8 \
  --workers "$WORKERS" --rounds 2 --local-steps 5 --grad-sample 256 --device cpu \
  --workdir "$OUT/cpu" --json "$OUT/scaling-cpu.json" --plot "$OUT/scaling-cpu.png" \
  --network 1,0.5 --network 10,0.05 > "$OUT/scaling-cpu.txt" 2> "$OUT/scaling-cpu.err" \
  || echo "CPU scaling failed (exit $?): see $OUT/scaling-cpu.err"

# 4. The GPUs: one worker per GPU, model and shards on the GPU; the fixed cost of a tiny round
#    (in hops of this machine) with one GPU worker.
if [ "$GPUS" -gt 0 ]; then
  GPU_WORKERS=$("$PYTHON" -c "print(','.join(str(w) for w in (1, 2, 4, 8) if w <= $GPUS))")
  timeout 120 "${DANE[@]}" bench scaling --store "$STORE" --model lenet --shards 8 \
    --workers "$GPU_WORKERS" --rounds 3 --local-steps 50 --device cuda --no-reference \
    --workdir "$OUT/gpu" --json "$OUT/scaling-gpu.json" \
    --plot "$OUT/scaling-gpu.png" > "$OUT/scaling-gpu.txt" 2> "$OUT/scaling-gpu.err" \
    || echo "GPU scaling failed (exit $?): see $OUT/scaling-gpu.err"
fi

echo
if [ -f "$OUT/correctness.json" ]; then
  "$PYTHON" -c "import json; r = json.load(open('$OUT/correctness.json')); print('GPU correctness:', r['verdict'], r['detail'])"
fi
if [ -f "$OUT/precision.txt" ]; then echo "== fp32 against bf16, one process =="; cat "$OUT/precision.txt"; fi
echo "== CPU cores =="; cat "$OUT/scaling-cpu.txt"
if [ -f "$OUT/scaling-gpu.txt" ]; then echo "== GPUs =="; cat "$OUT/scaling-gpu.txt"; fi
