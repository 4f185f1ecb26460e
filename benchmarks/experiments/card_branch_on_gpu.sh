#!/usr/bin/env bash
# One device call for whichever card comes (session 29; kind nvidia-h200 has given H100s since
# session 24, and a failed start costs 90-210 s of the session's device time).
#   H200: issue 30's closing measurements, closing_targets_on_gpu.sh (~215-450 s); the gpu
#         suite is the next call's (gpu_suite.sh d a b c, then suite_rest_on_gpu.sh).
#   else: the gpu suite's parts d, a, b and c with 8 workers (~280 s on an H100 in session 28),
#         then softmax_forced_host_cost.py (~40 s): what a change to launch_plans.py, which
#         every Triton op replays through, needs checked.
# Logs in $OUT/results.tgz (the device tool brings back 8 files at most).
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ "$card" == *H200* ]]; then
    bash benchmarks/experiments/closing_targets_on_gpu.sh 2>&1 | tail -70
    exit 0
fi
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
