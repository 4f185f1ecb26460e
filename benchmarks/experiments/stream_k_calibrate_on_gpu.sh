#!/usr/bin/env bash
# Step 19's calibration (session 27), one device call:
#   1. its GPU tests (stream_k_tests.sh);
#   2. ncu at 4096^3, two launches each of step 18, the calibration's builds (step 19 forced
#      to share; with DIAGNOSE=1 also without the partial sums' stores or loads) and step 19
#      (duration, DRAM bytes, L2 hit rate, tensor pipe);
#   3. stream_k_calibrate.py: those builds and step 19 against step 18, 200 cold pairs per
#      shape, saved K-tile times from 7.8 to 62;
#   4. FINAL=1: stream_k_on_gpu.sh (step 19 against 18 and cuBLAS: pairs, do_bench, targets).
# Carry .kernelab-cache built with `stream_k_calibrate.py --prebuild --diagnose` and
# `hgemm_ladder.py --steps 18,19 --prebuild`.
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
source benchmarks/experiments/packed_steps.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader

source benchmarks/experiments/stream_k_tests.sh
stream_k_tests
diagnose=()
if [ "${DIAGNOSE:-0}" = 1 ]; then diagnose=(--diagnose); fi

step "ncu at 4096^3: 18, the calibration's builds, 19 (two launches each)"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,lts__t_sector_hit_rate.pct,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed
timeout 90 ncu --clock-control none --target-processes all --kernel-name regex:hgemm \
    --metrics "$metrics" --csv \
    python3 benchmarks/experiments/stream_k_calibrate.py ${diagnose[@]+"${diagnose[@]}"} --ncu-target 4096x4096x4096 \
    > "$out/ncu.csv" 2> "$out/ncu.err"
echo "ncu exit $?"
grep -E '^"[0-9]' "$out/ncu.csv" | awk -F'","' '{print $1, $5, $(NF-2), $NF}' | tail -50

step "calibration"
timeout 200 python3 benchmarks/experiments/stream_k_calibrate.py ${diagnose[@]+"${diagnose[@]}"} --pairs 200 --out "$out" \
    2>&1 | tee "$out/calibrate.txt" | grep -v "^compiling"
if [ "${FINAL:-0}" = 1 ]; then
    step "stream_k_on_gpu.sh"
    mkdir -p "$out/final"
    OUT="$out/final" bash benchmarks/experiments/stream_k_on_gpu.sh 2>&1 | grep -v "^\(compiling\|checking\|timing\|pairing\)"
fi
step "done"
pack
