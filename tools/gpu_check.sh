#!/usr/bin/env bash
# The checks only a GPU machine can make, in one command that fits a short lease; everything goes under $OUT.
#
#     OUT=gpu-check bash tools/gpu_check.sh     # on a GPU machine: about 5 minutes
#
#   env.txt            the device, torch, CUDA, cuDNN, and what nvidia-smi says
#   cuda.xml, cuda.log every test marked cuda (pytest -m cuda), cut off by SIGINT after $TEST_LIMIT s so that
#                      pytest still writes the JUnit XML and names every test that ran
#   bf16_spread.json   the graphed step against the eager one in bf16, beside eager against itself (test_graph.py)
#   perf.json, perf.log python -m tools.perf_suite's eager and graphed step and epochs side by side (graph,
#                      epochs), then tools.batched (batched) and --graph compile (graph_compile) as the budget
#                      allows; PERF_ARGS="--budget 120 --skip graph,epochs,batched,graph_compile,compile,..."
#                      gives the earlier parts (sync, torchrun, step, throughput) instead
# On a machine without CUDA the tests skip, each with its reason, and perf_suite runs its small sizes:
# the suite runs it so, with PERF_ARGS set to something quick.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 - > "$OUT/env.txt" 2>&1 <<'PY'
import platform, torch
print("date", __import__("datetime").datetime.now().isoformat(timespec="seconds"))
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version())
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no CUDA device)")
PY
command -v nvidia-smi > /dev/null && nvidia-smi >> "$OUT/env.txt" 2>&1
cat "$OUT/env.txt" | head -3
OUT="$OUT" timeout -s INT "${TEST_LIMIT:-90}" python3 -m pytest -m cuda -v -p no:cacheprovider -rs \
    --junitxml="$OUT/cuda.xml" 2>&1 | tee "$OUT/cuda.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed"
tests=${PIPESTATUS[0]}
# shellcheck disable=SC2086  # PERF_ARGS is a list of flags
python3 -m tools.perf suite ${PERF_ARGS:---budget 200 --skip sync,torchrun,step,throughput,compile,epochs_compile,compile_modes} \
    --json "$OUT/perf.json" > "$OUT/perf.log" 2>&1
perf=$?
tail -40 "$OUT/perf.log"
echo "gpu_check: pytest -m cuda exited $tests, perf_suite $perf; files in $OUT"
exit $(( tests != 0 || perf != 0 ))
