#!/usr/bin/env bash
# The install-and-trust checks of one GPU session, in one call (the lent machine keeps nothing):
#   bash benchmarks/gpu_trust.sh [STAGES...]      stages: tests host sanitize e2e   (default: all four)
# TESTS="paths" narrows pytest (default: tests); PYTEST_ARGS adds options ("-n 8 -p xdist": tests that fail among
# parallel workers are re-run alone, since workers share one GPU's memory); TRITON_DIR=/path puts another triton
# first on the path (the triton 3.8 run); DEADLINE_S (default 560) bounds the call. Everything lands in $OUT (or
# ./gpu-out); the last lines printed are the summary.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
[ -f .commit ] && export KERNELWORKS_COMMIT=$(cat .commit)
export PYTHONPATH=${TRITON_DIR:+$TRITON_DIR:}$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then  # peers (liger-kernel) for the end-to-end comparison
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
start=$(date +%s); deadline=${DEADLINE_S:-560}
left() { echo $(( deadline - ($(date +%s) - start) - 10 )); }
tag=$(python3 -c "import triton; print('triton' + triton.__version__)")
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)" \
  | tee "$OUT/session-$tag.log"
summary=()
for stage in ${*:-tests host sanitize e2e}; do
  t0=$(date +%s)
  case $stage in
    tests) cache="-o cache_dir=/tmp/kw-pytest-cache"
           timeout "$(left)" python3 -m pytest -q -rfE $cache ${PYTEST_ARGS:-} ${TESTS:-tests} > "$OUT/tests-$tag.log" 2>&1
           rc=$?; res=$(tail -1 "$OUT/tests-$tag.log")
           if [ $rc = 1 ]; then  # parallel workers share one GPU: re-run what failed alone (an OOM is not a bug)
             timeout "$(left)" python3 -m pytest -q -rfE $cache --last-failed --last-failed-no-failures none ${TESTS:-tests} \
               > "$OUT/tests-rerun-$tag.log" 2>&1; rc=$?; res="$res; failed ones re-run alone: $(tail -1 "$OUT/tests-rerun-$tag.log")"
           fi ;;
    host) timeout "$(left)" python3 benchmarks/host_time.py --out "$OUT/host_time-$tag.json" --profile "$OUT/profile-$tag" \
            > "$OUT/host-$tag.log" 2>&1; rc=$?; res="see host-$tag.log"; cat "$OUT/host-$tag.log" ;;
    sanitize) timeout "$(left)" compute-sanitizer --tool memcheck --log-file "$OUT/memcheck-$tag.log" \
                python3 tests/hostile/sanitize_cases.py > "$OUT/sanitize-$tag.out" 2>&1; rc=$?
              res=$(grep -h "ERROR SUMMARY" "$OUT/memcheck-$tag.log" | tail -1) ;;
    e2e) timeout "$(left)" python3 benchmarks/e2e/run.py --jobs ${E2E_JOBS:-small-train} --out-dir "$OUT/e2e" \
           --deadline "$(left)" > "$OUT/e2e-$tag.log" 2>&1; rc=$?; res="see e2e-$tag.log"; tail -25 "$OUT/e2e-$tag.log" ;;
    *) rc=2; res="unknown stage" ;;
  esac
  summary+=("$stage ($tag) rc=$rc $(( $(date +%s) - t0 ))s: $res")
done
printf '%s\n' "${summary[@]}"
