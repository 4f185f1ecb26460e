#!/usr/bin/env bash
# Issue 30's measurements in one device call (session 25, for the H200), the gpu suite left to
# two more calls (below). Every step with the lean path (the default):
#   1. the launch-plan GPU tests (33 in session 25, ~20 s warm, ~45 s cold)
#   2. host cost per call at tiny sizes against torch, ~16 s a run, alternating: four runs on
#      the lean Python path (KERNELAB_COMPILED_REPLAY=0), four with the compiled replay (=1, the
#      default since session 26), one on Triton's hooked path. The host's
#      run-to-run noise is 3-10 us, so one run decides nothing: launch_repeats_summary.py
#      takes the median per path
#   3. every target under do_bench and kernelab's timer, baselines in the same run (~220 s)
#   4. where a vector_add call's host time goes, the compiled replay's pieces among them
# Outputs in $OUT/results.tgz (the device tool brings back 8 files at most), packed again after
# each step so a call cut short keeps what came before. A good targets run goes by hand to
# benchmarks/results/<gpu>/pytorch/pytorch_targets_<date>-session<n>.json.
# Then, one call each:
#   KERNELAB_DIRECT_LAUNCH=1 GPU_SUITE_WORKERS=8 bash benchmarks/gpu_suite.sh d a b c
#   bash benchmarks/experiments/suite_rest_on_gpu.sh   (c again if the first missed it; e, f)
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
source benchmarks/experiments/packed_steps.sh  # out, pack, step: all into $OUT/results.tgz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader

step "launch plan tests"
# the compiled replay is built on first use; a build that fails here is worth knowing first
python3 -c "from kernelab.kernels.triton import compiled_replay as c; print('compiled replay:', c.module() is not None, c.last_failure)"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_launch_plans_gpu.py \
    > "$out/plans_gpu.log" 2>&1
tail -3 "$out/plans_gpu.log"

for run in 1 2 3 4 5 6 7 8 9; do
    direct=1 compiled=0 name=launch-$run-direct1
    [ $((run % 2)) = 0 ] && compiled=1 name=launch-$run-compiled1
    [ "$run" = 9 ] && direct=0 name=launch-$run-direct0
    step "launch costs, run $run ($name)"
    mkdir -p "$out/$name"
    KERNELAB_DIRECT_LAUNCH=$direct KERNELAB_COMPILED_REPLAY=$compiled OUT="$out/$name" \
        timeout 60 python3 benchmarks/pytorch_targets.py --parts launch > "$out/$name.txt" 2>&1
    tail -8 "$out/$name.txt"
done

step "every target"
mkdir -p "$out/targets"
OUT="$out/targets" timeout 260 python3 benchmarks/pytorch_targets.py > "$out/targets.txt" 2>&1
tail -32 "$out/targets.txt"
step "host cost breakdown"
OUT="$out" timeout 90 python3 benchmarks/experiments/host_cost_breakdown.py > "$out/breakdown.txt" 2>&1
grep -E "us  |correct" "$out/breakdown.txt" | tail -40
step "summary"
python3 benchmarks/experiments/launch_repeats_summary.py "$out"/launch-*.txt
pack
