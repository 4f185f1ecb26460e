#!/usr/bin/env bash
# Direct launches with TMA descriptors, after the session-24 fix (tensor_maps.py: Triton 3.6's
# PyCUtensorMap is 256 bytes, the map in its last 128, checked against the tensor's address),
# and fresh outputs left out of the plan keys. In one device call, in order of need:
#   1. the launch-plan GPU tests on both paths (TMA direct launches among them)
#   2. host cost per call at tiny sizes, KERNELAB_DIRECT_LAUNCH 0 then 1
#   3. the Triton matmul targets under do_bench, direct launches on (1024^3 is host-bound)
#   4. where the host time goes (host_cost_breakdown.py, lean path)
#   5. gpu suite parts d, a, b with direct launches on (GPU_SUITE_WORKERS=8)
#   6. part c in whatever time is left
# The device tool brings back 8 files at most, so every log goes into $OUT/session24.tgz,
# packed again after each step (a call cut short keeps what came before).
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
out=${OUT:-.}
work=$(mktemp -d)
start=$SECONDS
step() { echo "== $1 ($((SECONDS - start)) s)"; }
pack() { tar czf "$out/session24.tgz" -C "$work" . ; }

step "launch plan tests"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_launch_plans_gpu.py \
    > "$work/plans_gpu.log" 2>&1
tail -6 "$work/plans_gpu.log"
pack

for direct in 0 1; do
    step "launch costs, KERNELAB_DIRECT_LAUNCH=$direct"
    mkdir -p "$work/launch-direct$direct"
    KERNELAB_DIRECT_LAUNCH=$direct OUT="$work/launch-direct$direct" timeout 90 \
        python3 benchmarks/pytorch_targets.py --parts launch > "$work/launch-direct$direct.txt" 2>&1
    tail -9 "$work/launch-direct$direct.txt"
    pack
done

step "triton matmul targets, direct launches on"
mkdir -p "$work/matmul-direct1"
KERNELAB_DIRECT_LAUNCH=1 OUT="$work/matmul-direct1" timeout 120 \
    python3 benchmarks/pytorch_targets.py --parts triton > "$work/matmul-direct1.txt" 2>&1
tail -6 "$work/matmul-direct1.txt"
pack

step "host cost breakdown"
KERNELAB_DIRECT_LAUNCH=1 timeout 60 python3 benchmarks/experiments/host_cost_breakdown.py \
    > "$work/breakdown.txt" 2>&1
head -40 "$work/breakdown.txt" | grep " us "
pack

step "gpu suite d a b"
KERNELAB_DIRECT_LAUNCH=1 GPU_SUITE_WORKERS=8 OUT="$work" timeout 240 \
    bash benchmarks/gpu_suite.sh d a b > "$work/suite-dab.txt" 2>&1
grep -E "passed|failed|error" "$work/suite-dab.txt" | tail -6
pack

left=$((575 - (SECONDS - start)))
step "gpu suite c ($left s left)"
if [ "$left" -gt 60 ]; then
    KERNELAB_DIRECT_LAUNCH=1 OUT="$work" timeout "$left" bash benchmarks/gpu_suite.sh c \
        > "$work/suite-c.txt" 2>&1
    grep -E "passed|failed|error" "$work/suite-c.txt" | tail -6
fi
pack
step "done"
