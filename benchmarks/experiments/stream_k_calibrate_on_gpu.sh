#!/usr/bin/env bash
# Step 19 after its first GPU run (session 27): float4 fix-up, and the rule of when to share.
#   1. step 19's tests under a time limit (the fix-up's loads and stores changed);
#   2. ncu at 4096^3, two launches each of step 18, the calibration's variants (step 19 forced
#      to share, with and without dropping read partial sums from L2) and step 19 (duration,
#      DRAM bytes, L2 hit rate, tensor pipe);
#   3. stream_k_calibrate.py: the variants and default step 19 against step 18, 200 cold pairs
#      per shape, saved K-tile times from 7.8 to 62;
#   4. FINAL=1: stream_k_on_gpu.sh (step 19 against 18 and cuBLAS: pairs, do_bench, targets).
# Carry .kernelab-cache built with `stream_k_calibrate.py --prebuild` (~150 s on an H100).
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
source benchmarks/experiments/packed_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader

step "tests"
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_hgemm_stream_k.py \
    tests/test_hgemm.py -k "stream_k or hgemm:19" > "$out/tests.log" 2>&1
tests=$?
tail -3 "$out/tests.log"
if [ "$tests" != 0 ]; then step "tests failed (exit $tests): no timing"; pack; exit 1; fi

step "ncu at 4096^3: 18, forced, forced_no_discard, 19 (two launches each)"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,lts__t_sector_hit_rate.pct,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed
timeout 90 ncu --clock-control none --target-processes all --kernel-name regex:hgemm \
    --metrics "$metrics" --csv \
    python3 benchmarks/experiments/stream_k_calibrate.py --ncu-target 4096x4096x4096 \
    > "$out/ncu.csv" 2> "$out/ncu.err"
echo "ncu exit $?"
grep -E '^"[0-9]' "$out/ncu.csv" | awk -F'","' '{print $5, $(NF-2), $NF}' | tail -30

step "calibration"
timeout 200 python3 benchmarks/experiments/stream_k_calibrate.py --pairs 200 --out "$out" \
    2>&1 | tee "$out/calibrate.txt" | grep -v "^compiling"
if [ "${FINAL:-0}" = 1 ]; then
    step "stream_k_on_gpu.sh"
    mkdir -p "$out/final"
    OUT="$out/final" bash benchmarks/experiments/stream_k_on_gpu.sh 2>&1 | grep -v "^\(compiling\|checking\|timing\|pairing\)"
fi
step "done"
pack
