#!/usr/bin/env bash
# Real compute-sanitizer logs, for the parser's fixtures (tests/check/sanitize_logs/real/), on a GPU machine:
#   OUT=/some/dir bash benchmarks/checks/sanitize_samples.sh
# 1. each program of benchmarks/checks/sanitize_samples.py under the tool it is for (the clean one under all four),
#    with the flags and environment `kw check --sanitize` gives its child (kernelworks.check.sanitize.child_command,
#    child_env): --error-exitcode 86, memcheck --padding 1048576, PYTORCH_NO_CUDA_MEMORY_CACHING=1;
# 2. `kw check --sanitize -v` end to end on the tests' fixture specs and on a quick softmax case (all four tools),
#    so its verdicts on real logs are in the .out files and its children's logs under kw/.
# Everything lands in $OUT/sanitize-logs/: NAME-TOOL.log (the tool's --log-file), NAME-TOOL.out (the program's own
# output), kw/ (kw's kept logs), kw-*.out (kw's tables), ENV.txt (versions), index.txt (one line per run: exit
# status, summary line, seconds). Needs torch, triton and compute-sanitizer (on PATH or in /usr/local/cuda/bin).
# JOBS runs at a time (default 6); each bounded by RUN_TIMEOUT_S (default 150) and by DEADLINE_S (default 220) for
# the whole: every run ends by then, and one that would start with less than 30 s left is listed as not run.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$PWD/gpu-out}
LOGS=$OUT/sanitize-logs
mkdir -p "$LOGS/kw"
: > "$LOGS/index.txt"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF TRITON_INTERPRET
PY=${PYTHON:-python3}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$CS" ]; then
  echo "compute-sanitizer is not on PATH nor in /usr/local/cuda/bin" | tee "$LOGS/index.txt" >&2
  exit 2
fi
PATH=$(dirname "$CS"):$PATH  # for kw check --sanitize too
export PATH
JOBS=${JOBS:-6}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-150}
DEADLINE_S=${DEADLINE_S:-220}
start=$(date +%s)
budget() {  # seconds a run starting now may take
  local left=$(( DEADLINE_S - ($(date +%s) - start) ))
  echo $(( left < RUN_TIMEOUT_S ? left : RUN_TIMEOUT_S ))
}

{ "$CS" --version
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  git rev-parse HEAD 2>/dev/null || cat .commit 2>/dev/null
} > "$LOGS/ENV.txt" 2>&1

# One line of index.txt for a finished run: NAME TOOL exit=N Ns, then the log's summary line(s).
note() {
  local name=$1 tool=$2 status=$3 t0=$4 log=$5
  echo "$name $tool exit=$status $(( $(date +%s) - t0 ))s $(grep -h -E '(ERROR|RACECHECK) SUMMARY' "$log" 2>/dev/null \
    | sed 's/^ *=* *//' | paste -sd ';' -)" >> "$LOGS/index.txt"
}

# NAME TOOL: one program of sanitize_samples.py under one tool.
sample() {
  local name=$1 tool=$2 t0 padding=()
  t0=$(date +%s)
  [ "$tool" = memcheck ] && padding=(--padding 1048576)
  timeout -k 5 "$(budget)" "$CS" --tool "$tool" --error-exitcode 86 ${padding[@]+"${padding[@]}"} \
    --log-file "$LOGS/$name-$tool.log" "$PY" benchmarks/checks/sanitize_samples.py "$name" > "$LOGS/$name-$tool.out" 2>&1
  note "$name" "$tool" $? "$t0" "$LOGS/$name-$tool.log"
}

# NAME RUNS TOOLS TARGET...: kw check --sanitize -v on TARGETs, which starts RUNS sanitizer runs (its children's
# logs kept under kw/). Its children run in sessions of their own, which a time-out of kw would orphan: each is
# bounded by kw's --sanitize-timeout instead, a share of the budget.
kw_check() {
  local name=$1 runs=$2 tools=$3 t0 b
  shift 3
  t0=$(date +%s)
  b=$(budget)
  timeout -k 5 "$b" "$PY" -m kernelworks check "$@" --sanitize-tools "$tools" --sanitize-logs "$LOGS/kw" \
    --sanitize-timeout $(( b > 60 ? (b - 30) / runs : 10 )) -v > "$LOGS/kw-$name.out" 2>&1
  local status=$? said
  # its summary line, else (kw refused or crashed) the last line it wrote, tqdm's carriage returns split off
  said=$(grep -h '^compute-sanitizer (' "$LOGS/kw-$name.out" \
    || tr '\r' '\n' < "$LOGS/kw-$name.out" | grep -v '^[[:space:]]*$' | tail -n 1)
  echo "kw-$name $tools exit=$status $(( $(date +%s) - t0 ))s $said" >> "$LOGS/index.txt"
}

# Starts "$@" in the background once fewer than JOBS runs are going, unless the deadline is near.
launch() {
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  if [ "$(budget)" -lt 30 ]; then
    echo "not run (deadline): $*" >> "$LOGS/index.txt"
    return
  fi
  "$@" &
}

# The longest runs first (kw's, several children each), the bug samples and the clean controls (their logs are
# what the fixtures need most) before the rest. kw check loads several FILE:SPEC targets of one file from one
# module (before kernelworks' load_spec ran a file once per process, the second load replaced the first's
# module, and --sanitize could no longer name the first spec for its child: "not registered nor bound").
fixtures=tests/check/sanitize_fixtures.py
launch kw_check softmax-racecheck 2 racecheck,synccheck softmax --case 1x7-fp32
launch kw_check fixtures-initcheck 3 initcheck $fixtures:UNINIT $fixtures:TORCH_UNINIT $fixtures:MASKED
launch sample uninit_read initcheck
launch sample oob_write memcheck
launch sample divergent_barrier synccheck
launch sample split_barrier synccheck
launch sample smem_race racecheck
for tool in memcheck racecheck initcheck synccheck; do
  launch sample clean "$tool"
done
launch kw_check softmax-memcheck 2 memcheck,initcheck softmax --case 1x7-fp32
launch sample warp_race racecheck
launch sample torch_uninit initcheck
launch sample padding_read initcheck
launch kw_check fixtures-memcheck 2 memcheck $fixtures:OOB $fixtures:MASKED
wait
echo "sanitize_samples: $(( $(date +%s) - start ))s, logs in $LOGS"
cat "$LOGS/index.txt"
