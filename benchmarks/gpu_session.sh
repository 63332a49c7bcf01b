#!/usr/bin/env bash
# One GPU session of kernelworks in a single call (the lent machine keeps nothing between sessions):
#   bash benchmarks/gpu_session.sh [STAGES...]    stages: check tests bench sweeps tune diagnose
#                                                 (default: check tests bench)
# CHECK_OPS / BENCH_OPS="op1 op2" narrow the check / bench (default all); BENCH_ARGS adds kw bench options;
# stage bench2 runs BENCH2_OPS with BENCH2_ARGS;
# TESTS="paths/args" the pytest run; SWEEPS="benchmarks/sweeps/x.py ..." picks the sweeps
# (default all); TUNE="op:mode:case ..." what `kw tune` searches (TUNE_ARGS its options);
# DIAGNOSE="op:case ..." picks what diagnose profiles;
# DEADLINE_S (default 570) bounds the whole call: each stage gets the time left, so the tarball is always made.
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
start=$(date +%s)
deadline=${DEADLINE_S:-570}
left() { echo $(( deadline - ($(date +%s) - start) - 20 )); }
kw() { python3 -m kernelworks "$@"; }
kw --version | tee "$OUT/session.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee -a "$OUT/session.log"
kw calibrate 2>&1 | tee -a "$OUT/session.log"
summary=()
for stage in $stages; do
  t0=$(date +%s)
  case $stage in
    check) timeout "$(left)" python3 -m kernelworks check ${CHECK_OPS:-all} > "$OUT/check.log" 2>&1; rc=$?
           tail -1 "$OUT/check.log" ;;
    # no -x: one GPU call must show every failure
    tests) timeout "$(left)" python3 -m pytest -q ${TESTS:-tests} > "$OUT/tests.log" 2>&1; rc=$?; tail -1 "$OUT/tests.log" ;;
    bench) timeout "$(left)" python3 -m kernelworks bench ${BENCH_OPS:-all} ${BENCH_ARGS:-} --save "$OUT/results" \
             > "$OUT/bench.log" 2>&1; rc=$? ;;
    bench2) timeout "$(left)" python3 -m kernelworks bench ${BENCH2_OPS} ${BENCH2_ARGS:-} --save "$OUT/results" \
              >> "$OUT/bench.log" 2>&1; rc=$? ;;  # a second bench with other options (e.g. --mode fwd)
    sweeps)  # every benchmarks/sweeps/*.py (or SWEEPS="a b"), each writing $OUT/results/sweeps/<name>.json
      rc=0; mkdir -p "$OUT/results/sweeps"
      for f in ${SWEEPS:-benchmarks/sweeps/*.py}; do
        name=$(basename "$f" .py)
        timeout "$(left)" python3 "$f" --out "$OUT/results/sweeps/$name.json" >> "$OUT/sweeps.log" 2>&1 || rc=$?
      done
      cat "$OUT/sweeps.log" ;;
    tune)  # TUNE="op:mode:case ..." (mode fwd or bwd), each `kw tune` into $OUT/results/tune/<op>-<mode>-<case>/;
           # TUNE_ARGS adds options (e.g. --budget 3 --strategy pattern)
      rc=0
      for item in ${TUNE:-flash_attention:bwd:b2-hq8-hkv4-s4k-d256-causal}; do
        IFS=: read -r op mode tcase <<< "$item"
        timeout "$(left)" python3 -m kernelworks tune "$op" --mode "$mode" --case "$tcase" ${TUNE_ARGS:-} --no-cache \
          --out "$OUT/results/tune/$op-$mode-$tcase" >> "$OUT/tune.log" 2>&1 || rc=$?
      done
      grep -E "^\*\*" "$OUT/tune.log" ;;
    diagnose)
      rc=0
      for item in ${DIAGNOSE:-softmax:8192x8192}; do
        timeout "$(left)" python3 -m kernelworks diagnose "${item%%:*}" --case "${item#*:}" --ncu \
          >> "$OUT/diagnose.log" 2>&1 || rc=$?
      done
      cat "$OUT/diagnose.log" ;;
    *) echo "unknown stage $stage"; rc=2 ;;
  esac
  summary+=("$stage rc=$rc $(( $(date +%s) - t0 ))s")
done
grep -E "FAIL" "$OUT/check.log" 2>/dev/null | head -20
cat "$OUT/bench.log" 2>/dev/null | grep -v "it/s\]" | tail -120
tar -czf "$OUT/session.tar.gz" -C "$OUT" results session.log $(cd "$OUT" && ls *.log) 2>/dev/null
printf '%s\n' "${summary[@]}"
