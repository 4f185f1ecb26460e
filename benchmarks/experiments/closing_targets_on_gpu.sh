#!/usr/bin/env bash
# Issue 30's measurements in one device call (session 25, for the H200), the gpu suite left to
# two more calls (below). Every step with the lean path (the default):
#   1. the launch-plan GPU tests (33 in session 25, ~20 s warm, ~45 s cold)
#   2. host cost per call at tiny sizes against torch: five runs on the lean path, one on
#      Triton's hooked one (~16 s each; the host's run-to-run noise is 3-10 us, so one run
#      decides nothing: launch_repeats_summary.py takes the median)
#   3. every target under do_bench and kernelab's timer, baselines in the same run (~220 s)
# Outputs in $OUT/results.tgz (the device tool brings back 8 files at most), packed again after
# each step so a call cut short keeps what came before. A good targets run goes by hand to
# benchmarks/results/<gpu>/pytorch/pytorch_targets_<date>-session<n>.json.
# Then, one call each:
#   KERNELAB_DIRECT_LAUNCH=1 GPU_SUITE_WORKERS=8 bash benchmarks/gpu_suite.sh d a b c
#   bash benchmarks/experiments/suite_rest_on_gpu.sh   (c again if the first missed it; e, f)
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
final=${OUT:-.}
out=$(mktemp -d)
pack() { tar czf "$final/results.tgz" -C "$out" . ; }
start=$SECONDS
step() { pack; echo "== $1 ($((SECONDS - start)) s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader

step "launch plan tests"
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_launch_plans_gpu.py \
    > "$out/plans_gpu.log" 2>&1
tail -3 "$out/plans_gpu.log"

for run in 1 2 3 4 5 6; do
    direct=1
    [ "$run" = 6 ] && direct=0
    step "launch costs, run $run, KERNELAB_DIRECT_LAUNCH=$direct"
    mkdir -p "$out/launch-$run-direct$direct"
    KERNELAB_DIRECT_LAUNCH=$direct OUT="$out/launch-$run-direct$direct" timeout 60 \
        python3 benchmarks/pytorch_targets.py --parts launch > "$out/launch-$run-direct$direct.txt" 2>&1
    tail -8 "$out/launch-$run-direct$direct.txt"
done

step "every target"
mkdir -p "$out/targets"
OUT="$out/targets" timeout 260 python3 benchmarks/pytorch_targets.py > "$out/targets.txt" 2>&1
tail -32 "$out/targets.txt"
step "summary"
python3 benchmarks/experiments/launch_repeats_summary.py "$out"/launch-*-direct*.txt
pack
