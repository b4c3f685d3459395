#!/usr/bin/env bash
# The one command a lent GPU machine runs: four stages in order of value, each under its own time limit, at most
# $LIMIT seconds (default 560) in all.
#
#     OUT=gpu-check COMMIT=$(git rev-parse HEAD) bash studies/gpu_check.sh   # on a GPU machine, Fashion-MNIST in data/fashion-mnist
#
# Such a machine brings back at most 8 small files from $OUT (studies/outbox.py: RULES). So every stage writes into
# a work folder ($WORK, default a new temporary one), and $OUT holds two files only, whatever moment the command
# is killed at: gpu_check.log, this script's own output, and gpu-check.tar.gz, the work folder so far, rewritten
# whole after each stage and every 30 s (a kill leaves the last one whole; its snapshot.json lists what it holds).
#
# 1. env.txt             the device, torch, CUDA, cuDNN, the commit (COMMIT, for a copy without .git), nvidia-smi
# 2. cuda.xml, cuda.log  every test marked cuda (pytest -m cuda), the graphed step's included, stopped by SIGINT
#                        after $TEST_LIMIT s (default 100): the run stops there and still writes the JUnit XML
#                        (tests/hooks.py); graph-cases.txt, the graph tests it should hold; bf16_spread.json
# 3. perf.json, perf.log python -m tools.perf suite: train.py's epochs graphed, then eager (epochs_100_min both
#                        ways), then the step eager against graphed; perf.json rewritten after each part;
#                        $PERF_LIMIT s (default 170) for its --budget of 150; PERF_ARGS replaces its flags
# 4. wave/, wave.log     one wave of the paper's recipe (python -m studies.fmnist recipe wave, studies/recipe.py) in the
#                        time left: five train.py processes under CUDA MPS, --graph capture only where every graph
#                        test of stage 2 passed and stage 3's graphed epochs ran (recipe.graph_from), a run whose
#                        capture dies before its first epoch started again eager; metrics epoch by epoch, no
#                        checkpoints. Then, where the raw data lives: python -m studies.fmnist recipe pack
#                        gpu-check/gpu-check.tar.gz
#
# A later lease runs the wave alone: with WAVE_ONLY=1, where $GPU_DOCS (default docs/gpu) holds already a cuda*.xml
# in which every test and every graph test passed and a perf*.json with eager and graphed epochs_100_min for this
# tree's step (recipe.evidence), stages 2 and 3 are skipped and the wave gets the whole limit; where it does not,
# the script says why and runs all four stages. WAVE_SEEDS (default 1) seeds of runs for the wave; the wave stops
# the runs it projects cannot finish, the last in recipe.ORDER first.
#
#     OUT=gpu-check COMMIT=$(git rev-parse HEAD) WAVE_ONLY=1 bash studies/gpu_check.sh
#
# PYTHON (default python3) is the interpreter of every stage: give the one with torch. FMNIST is the folder of
# the four Fashion-MNIST IDX files (default data/fashion-mnist, else Debian's /usr/share/datasets/fashion-mnist).
# WAVE_ARGS replaces the wave's own flags (the suite: --size toy --device cpu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-check}
WORK=${WORK:-$(mktemp -d)}
PY=${PYTHON:-python3}
LIMIT=${LIMIT:-560}
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
export CMD_COMMIT=${COMMIT:-$(git rev-parse HEAD 2> /dev/null)}  # train.py records it where the copy has no .git
left() { echo $(( LIMIT - SECONDS )); }
stage_done() {  # the archive after stage $1, and whether $OUT is within the return rules
    "$PY" -m studies.outbox snapshot "$WORK" "$OUT" > /dev/null
    echo "gpu_check: after stage $1, $("$PY" -m studies.outbox check "$OUT")"
}
"$PY" -m studies.outbox snapshot "$WORK" "$OUT" --every 30 & snapshots=$!
finish() {
    kill "$snapshots" 2> /dev/null; wait "$snapshots" 2> /dev/null  # one that is under way finishes first
    stage_done end
}
trap finish EXIT
trap 'exit 143' TERM INT  # a kill by timeout still leaves the last archive and the log

FMNIST=${FMNIST:-data/fashion-mnist}
[ -d "$FMNIST" ] || FMNIST=/usr/share/datasets/fashion-mnist
# said first, not after the tests: without the data, stage 4 has nothing to train
[ -f "$FMNIST/train-images-idx3-ubyte.gz" ] || [ -f "$FMNIST/train-images-idx3-ubyte" ] ||
    echo "gpu_check: no Fashion-MNIST in $FMNIST: stage 4 (the wave) will not run; set FMNIST, or carry data/fashion-mnist"
echo "gpu_check 1/4: the environment (work folder $WORK)"
timeout 120 "$PY" - > "$WORK/env.txt" 2>&1 <<'PY'
import os, platform, torch
print("date", __import__("datetime").datetime.now().isoformat(timespec="seconds"))
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version())
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no CUDA device)")
print("commit", os.environ.get("CMD_COMMIT") or "unknown (no .git and no COMMIT)")
PY
env_rc=$?
command -v nvidia-smi > /dev/null && timeout 30 nvidia-smi >> "$WORK/env.txt" 2>&1
head -4 "$WORK/env.txt"
stage_done 1

timeout 120 "$PY" -m pytest -m cuda --collect-only -q -p no:cacheprovider tests/test_graph.py \
    lab/tests/test_graph_rules.py > "$WORK/graph-cases.txt" 2>&1
tests=0 perf=0 graph=""
if [ -n "${WAVE_ONLY:-}" ]; then
    said=$("$PY" -c "import sys; from studies.recipe import evidence; print(evidence(*sys.argv[1:]))" \
        "${GPU_DOCS:-docs/gpu}" "$WORK/graph-cases.txt" 2>&1 | tail -1)
    case $said in
        capture:*) graph=capture; echo "gpu_check: WAVE_ONLY: ${said#capture: }; stages 2 and 3 skipped";;
        *) echo "gpu_check: WAVE_ONLY, but ${said#no: }; all four stages run";;
    esac
fi
if [ -z "$graph" ]; then
    echo "gpu_check 2/4: pytest -m cuda ($(left) s left)"
    OUT="$WORK" timeout -s INT -k 20 "${TEST_LIMIT:-100}" "$PY" -m pytest -m cuda -v -p no:cacheprovider -rs \
        --junitxml="$WORK/cuda.xml" test_cmd.py tests lab/tests 2>&1 | tee "$WORK/cuda.log" | grep -E "PASSED|FAILED|ERROR|passed|failed|skipped|Interrupted"
    tests=${PIPESTATUS[0]}
    stage_done 2

    echo "gpu_check 3/4: perf suite ($(left) s left)"
    # shellcheck disable=SC2086  # PERF_ARGS is a list of flags
    timeout -k 10 "${PERF_LIMIT:-170}" "$PY" -m tools.perf suite \
        ${PERF_ARGS:---budget 150 --skip sync,torchrun,step,throughput,batched,graph_compile,compile,epochs_compile,compile_modes} \
        --json "$WORK/perf.json" > "$WORK/perf.log" 2>&1
    perf=$?
    grep -E "^(\[perf|device |torch |epoch|graph|peak|wall_s)" "$WORK/perf.log"  # the figures that decide the graph's default
    stage_done 3

    # the wave captures the graph only where stage 2's graph tests all passed and stage 3's graphed epochs ran
    graph=$("$PY" -c "import sys; from studies.recipe import graph_from; print(graph_from(*sys.argv[1:]))" \
        "$WORK/cuda.xml" "$WORK/graph-cases.txt" "$WORK/perf.json" 2> /dev/null || echo "off: recipe.graph_from failed")
fi
budget=$(( $(left) - 40 ))  # what the wave's runs may use; the rest stops them and writes wave.json
echo "gpu_check 4/4: one wave of the recipe, --graph $graph, budget $budget s"
if (( budget < 60 )); then
    echo "gpu_check: no time left for a wave"; wave=1
else
    # shellcheck disable=SC2086  # WAVE_ARGS is a list of flags
    timeout -k 10 $(( budget + 30 )) "$PY" -m studies.fmnist recipe wave --out "$WORK/wave" --data-dir "$FMNIST" \
        --graph "${graph%%:*}" --budget "$budget" --seeds "${WAVE_SEEDS:-1}" ${WAVE_ARGS:---device cuda --mps} 2>&1 |
        tee "$WORK/wave.log"
    wave=${PIPESTATUS[0]}
fi
echo "gpu_check: env $env_rc, pytest -m cuda $tests, perf $perf, wave $wave (graph ${graph%%:*}); $SECONDS s"
exit $(( env_rc != 0 || tests != 0 || perf != 0 || wave != 0 ))
