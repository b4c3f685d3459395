#!/usr/bin/env bash
# The one command a lent GPU machine runs: four stages in order of value, each under its own time limit, each
# leaving its files in $OUT even when a later one fails; at most $LIMIT seconds (default 540) in all.
#
#     OUT=gpu-check bash tools/gpu_check.sh     # on a GPU machine, Fashion-MNIST in data/fashion-mnist
#
# 1. env.txt             the device, torch, CUDA, cuDNN, and what nvidia-smi says
# 2. cuda.xml, cuda.log  every test marked cuda (pytest -m cuda), the graphed step's included, cut off by SIGINT
#                        after $TEST_LIMIT s (default 100) so that pytest still writes the JUnit XML;
#                        bf16_spread.json  the graphed step against the eager one in bf16 (test_graph.py)
# 3. perf.json, perf.log python -m tools.perf suite: the main command eager and graphed side by side (step ms,
#                        epochs_100_min both ways, capture seconds, peak memory), $PERF_LIMIT s (default 150);
#                        PERF_ARGS replaces its flags
# 4. wave/               one wave of the paper's recipe (python -m tools.fmnist recipe wave, tools/recipe.py) in
#                        the time left: five train.py processes under CUDA MPS, --graph capture if stage 2's graph
#                        tests passed, each run's metrics epoch by epoch; then `python -m tools.fmnist recipe pack
#                        $OUT` on the machine that keeps the raw data. No checkpoints come back.
#
# PYTHON (default python3) is the interpreter of every stage: give the one with torch. FMNIST is the folder of
# the four Fashion-MNIST IDX files (default data/fashion-mnist, else Debian's /usr/share/datasets/fashion-mnist).
# WAVE_ARGS replaces the wave's own flags (the suite: --size toy --device cpu, no MPS).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check}
PY=${PYTHON:-python3}
LIMIT=${LIMIT:-540}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
left() { echo $(( LIMIT - SECONDS )); }

FMNIST=${FMNIST:-data/fashion-mnist}
[ -d "$FMNIST" ] || FMNIST=/usr/share/datasets/fashion-mnist
# said first, not after the tests: without the data, stage 4 has nothing to train
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || [ -f "$FMNIST/train-images-idx3-ubyte" ] ||
    echo "gpu_check: no Fashion-MNIST in $FMNIST: stage 4 (the wave) will not run; set FMNIST, or carry data/fashion-mnist"
echo "gpu_check 1/4: the environment"
timeout 120 "$PY" - > "$OUT/env.txt" 2>&1 <<'PY'
import platform, torch
print("date", __import__("datetime").datetime.now().isoformat(timespec="seconds"))
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version())
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no CUDA device)")
PY
env_rc=$?
command -v nvidia-smi > /dev/null && timeout 30 nvidia-smi >> "$OUT/env.txt" 2>&1
head -3 "$OUT/env.txt"

echo "gpu_check 2/4: pytest -m cuda ($(left) s left)"
OUT="$OUT" timeout -s INT -k 20 "${TEST_LIMIT:-100}" "$PY" -m pytest -m cuda -v -p no:cacheprovider -rs \
    --junitxml="$OUT/cuda.xml" 2>&1 | tee "$OUT/cuda.log" | grep -E "PASSED|FAILED|ERROR|passed|failed"
tests=${PIPESTATUS[0]}
# the graph is captured in the wave only where its own CUDA tests ran and passed
graph=$("$PY" -c "import sys; from tools.recipe import graph_from; print(graph_from(sys.argv[1]))" "$OUT/cuda.xml" \
    2>/dev/null || echo off)

echo "gpu_check 3/4: perf suite ($(left) s left)"
# shellcheck disable=SC2086  # PERF_ARGS is a list of flags
timeout -k 20 "${PERF_LIMIT:-150}" "$PY" -m tools.perf suite \
    ${PERF_ARGS:---budget 120 --skip sync,torchrun,step,throughput,compile,epochs_compile,compile_modes,batched,graph_compile} \
    --json "$OUT/perf.json" > "$OUT/perf.log" 2>&1
perf=$?
tail -25 "$OUT/perf.log"

budget=$(( $(left) - 40 ))  # what the wave's runs may use; the rest stops them and writes wave.json
echo "gpu_check 4/4: one wave of the recipe, --graph $graph, budget $budget s"
if (( budget < 60 )); then
    echo "gpu_check: no time left for a wave"; wave=1
else
    # shellcheck disable=SC2086  # WAVE_ARGS is a list of flags
    timeout -k 10 $(( budget + 30 )) "$PY" -m tools.fmnist recipe wave --out "$OUT/wave" --data-dir "$FMNIST" \
        --graph "$graph" --budget "$budget" ${WAVE_ARGS:---device cuda --mps} 2>&1 | tee "$OUT/wave.log"
    wave=${PIPESTATUS[0]}
fi
find "$OUT" -name '*.pt' -delete  # a wave killed outright leaves its checkpoints: too large to bring back
echo "gpu_check: env $env_rc, pytest -m cuda $tests, perf $perf, wave $wave (graph $graph); $SECONDS s; files in $OUT"
exit $(( env_rc != 0 || tests != 0 || perf != 0 || wave != 0 ))
