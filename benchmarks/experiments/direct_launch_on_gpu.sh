#!/usr/bin/env bash
# Direct launches (plain and TMA) on the GPU, in one device call (sessions 22-23):
#   1. how the installed Triton passes a host TensorDescriptor (triton_tma_launch_path.py)
#   2. the launch-plan GPU tests, direct launches of plain and TMA kernels among them
#   3. host cost per call at tiny sizes against torch, KERNELAB_DIRECT_LAUNCH 0 then 1 (1: the
#      lean replay path, launch_plans.DIRECT)
#   4. every target under do_bench with direct launches on (pytorch_targets.py, all parts)
#   5. gpu suite parts d, a, b (GPU_SUITE_WORKERS=8), direct launches on
#   6. where vector_add's host time goes (host_cost_breakdown.py)
#   7. softmax at row counts around 256 MiB against copy (softmax_tail_probe.py, session 24)
#   8. hgemm:18 at 4096^3 under each of the ways do_bench and kernelab's timer differ
#      (hgemm_do_bench_gap.py, session 24)
#   9. the host cost runs again, 0 then 1 (the host's run-to-run noise is 3-10 us)
# in order of need: a call cut by its time limit keeps what came first.
# Outputs in $OUT/results.tgz; pytorch_targets' JSON per run under launch-<n>-direct<v>/ and
# targets-direct1/ (not named pytorch_targets_*: the README's do_bench table reads the
# newest such file under benchmarks/results/h200/pytorch/, where a good run is copied by hand).
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
source benchmarks/experiments/packed_steps.sh  # out, pack, step: all into $OUT/results.tgz

step "tma launch path"
timeout 60 python3 benchmarks/experiments/triton_tma_launch_path.py > "$out/tma_path.txt" 2>&1
tail -4 "$out/tma_path.txt"

step "launch plan tests"
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_launch_plans_gpu.py \
    > "$out/plans_gpu.log" 2>&1
tail -8 "$out/plans_gpu.log"
if grep -qE "FAILED|ERROR" "$out/plans_gpu.log"; then
    # the rest of the call measures plain direct launches, TMA ones left to Triton's launcher
    export KERNELAB_DIRECT_TMA=0
    echo "plan tests failed: KERNELAB_DIRECT_TMA=0 from here on"
fi

run=0
launch_costs() {
    for direct in 0 1; do
        run=$((run + 1))
        step "launch costs, run $run, KERNELAB_DIRECT_LAUNCH=$direct"
        mkdir -p "$out/launch-$run-direct$direct"
        KERNELAB_DIRECT_LAUNCH=$direct OUT="$out/launch-$run-direct$direct" timeout 90 \
            python3 benchmarks/pytorch_targets.py --parts launch \
            > "$out/launch-$run-direct$direct.txt" 2>&1
        tail -9 "$out/launch-$run-direct$direct.txt"
    done
}
launch_costs

step "every target, direct launches on"
mkdir -p "$out/targets-direct1"
KERNELAB_DIRECT_LAUNCH=1 OUT="$out/targets-direct1" timeout 220 \
    python3 benchmarks/pytorch_targets.py > "$out/targets-direct1.txt" 2>&1
tail -32 "$out/targets-direct1.txt"

step "gpu suite d a b"
# with direct launches on (the default since session 24; set here so that the log says so)
KERNELAB_DIRECT_LAUNCH=1 GPU_SUITE_WORKERS=8 OUT="$out" timeout 230 bash benchmarks/gpu_suite.sh d a b > "$out/suite.txt" 2>&1
grep -E "passed|failed|error" "$out/suite.txt" | tail -8

step "host cost breakdown"
# the lean path's replay (session 21 measured the hooked one: 14.0 us)
KERNELAB_DIRECT_LAUNCH=1 timeout 60 python3 benchmarks/experiments/host_cost_breakdown.py \
    > "$out/breakdown.txt" 2>&1
tail -14 "$out/breakdown.txt"

step "softmax tail probe"
# is the 256 MiB shortfall the last round? (softmax_fixed_cost_fit.py: 6-8 us against 4.5)
mkdir -p "$out/tail"
timeout 150 python3 benchmarks/experiments/softmax_tail_probe.py --out "$out/tail" \
    > "$out/tail.txt" 2>&1
tail -24 "$out/tail.txt"

step "hgemm:18 under do_bench against kernelab's timer"
timeout 90 python3 benchmarks/experiments/hgemm_do_bench_gap.py --out "$out" > "$out/hgemm_gap.txt" 2>&1
tail -9 "$out/hgemm_gap.txt"

launch_costs
step "done"
