#!/usr/bin/env bash
# One GPU session of kernelworks in a single call (the lent machine keeps nothing between sessions):
#   bash benchmarks/gpu_session.sh [STAGES...]    stages: check tests bench (default: all three)
# Peer wheels (liger-kernel) are taken from .whl/ when present. Everything lands in $OUT (or ./gpu-out):
# logs, the results JSON tree and a tarball of both; the last lines printed are the summary.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/results"
# The device gets a copy of the tree without .git: pass the commit in (gpu_session.sh writes it when run
# where git works, e.g. `git rev-parse --short=12 HEAD > .commit` before sending the tree).
[ -f .commit ] && export KERNELWORKS_COMMIT=$(cat .commit)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 KERNELWORKS_CACHE=$OUT/cache
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
stages=${*:-check tests bench}
kw() { python3 -m kernelworks "$@"; }
kw --version | tee "$OUT/session.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$OUT/session.log"
kw calibrate 2>&1 | tee -a "$OUT/session.log"
summary=()
for stage in $stages; do
  t0=$(date +%s)
  case $stage in
    check) kw check all > "$OUT/check.log" 2>&1; rc=$?; tail -1 "$OUT/check.log" ;;
    tests) python3 -m pytest -q tests > "$OUT/tests.log" 2>&1; rc=$?; tail -1 "$OUT/tests.log" ;;  # no -x: one GPU call must show every failure
    bench) kw bench ${BENCH_OPS:-all} --save "$OUT/results" > "$OUT/bench.log" 2>&1; rc=$? ;;
    *) echo "unknown stage $stage"; rc=2 ;;
  esac
  summary+=("$stage rc=$rc $(( $(date +%s) - t0 ))s")
done
grep -E "FAIL" "$OUT/check.log" 2>/dev/null | head -20
cat "$OUT/bench.log" 2>/dev/null | grep -v "it/s\]" | tail -120
tar -czf "$OUT/session.tar.gz" -C "$OUT" results session.log $(cd "$OUT" && ls *.log) 2>/dev/null
printf '%s\n' "${summary[@]}"
