#!/usr/bin/env bash
# One device call for whichever card comes (kind nvidia-h200 has given H100s since session 24,
# and a failed start costs 90-210 s of the session's device time).
#   H200: issue 30's closing measurements, closing_targets_on_gpu.sh (~215-450 s), alone: with
#         the gpu suite after it (sessions 26-28's h200_else_paired.sh) a call could pass its
#         600 s. The gpu suite is the next call's (gpu_suite.sh d a b c, then
#         suite_rest_on_gpu.sh).
#   else, by ELSE:
#     suite (the default): the gpu suite's parts d, a, b and c with 8 workers (~200-280 s on an
#         H100), then softmax_forced_host_cost.py (~15 s): what a change to launch_plans.py,
#         which every Triton op replays through, needs checked;
#     paired: hgemm:18 against cuBLAS at 4096^3 and 8192^3 on the paired harness (300 cold
#         pairs), then pytorch_targets.py --parts gemm twice, so do_bench and the pairs read
#         the same card within a minute of each other (~120 s; session 26);
#     stream-k: hgemm step 19 against step 18 and cuBLAS, stream_k_on_gpu.sh (~60 s);
#     tests: only the gpu tests TESTS names (pytest arguments, tuning on), for a change that
#         needs a few tests checked and not a whole suite's device time.
# Logs in $OUT/results.tgz (the device tool brings back 8 files at most), paired's as files.
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ "$card" == *H200* ]]; then
    bash benchmarks/experiments/closing_targets_on_gpu.sh 2>&1 | tail -70
    exit 0
fi
case ${ELSE:-suite} in
    stream-k)
        bash benchmarks/experiments/stream_k_on_gpu.sh
        exit $?
        ;;
    paired)
        timeout 200 python3 benchmarks/hgemm_ladder.py --steps 18 --sizes 4096,8192 --modes cold \
            --max-time 0.5 --paired 300 --paired-modes cold --out "$OUT/paired" 2>&1 | tail -25
        for run in 1 2; do
            mkdir -p "$OUT/gemm$run"
            OUT="$OUT/gemm$run" timeout 100 python3 benchmarks/pytorch_targets.py --parts gemm 2>&1 |
                grep -E "^(sgemm|hgemm)"
        done
        exit 0
        ;;
    tests)
        # TESTS is parsed as shell words, so -k "a or b" keeps its quotes' meaning (an
        # unquoted ${TESTS} would hand pytest the quote characters; session 30)
        eval "pytest_args=(${TESTS:?ELSE=tests needs TESTS, pytest arguments})"
        KERNELAB_DIRECT_LAUNCH=1 timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider \
            --tb=short -rfE "${pytest_args[@]}" 2>&1 | tail -30
        exit $?
        ;;
    suite) ;;
    *)
        echo "card_branch_on_gpu.sh: ELSE must be suite, tests, paired or stream-k, not '$ELSE'" >&2
        exit 2
        ;;
esac
source benchmarks/experiments/packed_steps.sh # out, pack, step: all into $OUT/results.tgz
step "gpu suite d a b c"
KERNELAB_DIRECT_LAUNCH=1 GPU_SUITE_WORKERS=8 OUT="$out" timeout 400 \
    bash benchmarks/gpu_suite.sh d a b c > "$out/suite.txt" 2>&1
echo "suite exit $?"
for log in "$out"/gpu-suite-part-*.log; do echo "$(basename "$log"): $(tail -1 "$log")"; done
grep -h "^FAILED" "$out"/gpu-suite-part-*.log | head -10
step "forced softmax host cost"
timeout 100 python3 benchmarks/experiments/softmax_forced_host_cost.py > "$out/softmax_forced.txt" 2>&1
tail -13 "$out/softmax_forced.txt"
step "done"
