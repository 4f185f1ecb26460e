#!/usr/bin/env bash
# The gpu suite's parts c, e and f in one device call (session 23), direct launches on
# (KERNELAB_DIRECT_LAUNCH=1, the lean path direct_launch_on_gpu.sh runs with parts d, a, b).
# Part c runs alone (it has timer and ncu tests); then e and f side by side: each runs its
# fixture solutions one at a time in worker processes, and the verdicts they check are wrong
# or right answers and speedups of 0.003-0.05x for the slow ones (session 21), which sharing
# the GPU with the other suite cannot turn around. Alone they took 317 s and 332 s, so side by
# side both should fit the call's 600 s after c (139 s in session 20, more now that the
# launch-plan tests run on both paths): limits of 230 s for c and 345 s for e and f.
# Logs (gpu-suite-part-<p>.log and the rest) in $OUT/results.tgz.
set -u -o pipefail
cd "$(dirname "$0")/../.."
export KERNELAB_DIRECT_LAUNCH=1
source benchmarks/experiments/packed_steps.sh  # out, pack, step: all into $OUT/results.tgz
# SKIP_C=1: part c passed in an earlier call (closing_targets_on_gpu.sh's next calls)
if [ "${SKIP_C:-0}" != 1 ]; then
    echo "== part c (0 s)"
    OUT="$out" timeout 230 bash benchmarks/gpu_suite.sh c > "$out/suite-c.txt" 2>&1
    echo "part c exit $?"
    pack
    tail -3 "$out/suite-c.txt"
fi
echo "== parts e and f side by side ($((SECONDS - start)) s)"
mkdir -p "$out/eval-e" "$out/eval-f"
OUT="$out" KERNELAB_EVAL_OUT="$out/eval-e" timeout 345 bash benchmarks/gpu_suite.sh e > "$out/suite-e.txt" 2>&1 &
e=$!
OUT="$out" KERNELAB_EVAL_OUT="$out/eval-f" timeout 345 bash benchmarks/gpu_suite.sh f > "$out/suite-f.txt" 2>&1 &
f=$!
wait $e; echo "part e exit $?"
wait $f; echo "part f exit $?"
for p in e f; do grep -E "passed|failed|FAILED|error" "$out/suite-$p.txt" | tail -5; done
pack
echo "== done ($((SECONDS - start)) s)"
