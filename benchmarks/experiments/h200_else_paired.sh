#!/usr/bin/env bash
# One device call that does the right thing with whichever card comes (session 26: kind
# nvidia-h200 has given an H100 every time since session 24).
#   H200: issue 30's closing measurements (closing_targets_on_gpu.sh, ~215 s on a fast host),
#         then gpu suite parts d, a, b and c (~195 s); parts e and f are a second call
#         (SKIP_C=1 bash benchmarks/experiments/suite_rest_on_gpu.sh).
#   else: STREAM_K=1: hgemm step 19 against step 18 and cuBLAS, stream_k_on_gpu.sh (~60 s);
#         otherwise hgemm:18 against cuBLAS at 4096^3 and 8192^3 on the paired harness (300
#         cold pairs), then pytorch_targets.py --parts gemm twice, so do_bench and the pairs
#         read the same card within a minute of each other (~120 s).
# Everything lands in $OUT (results.tgz from the H200 branch and stream-K, plain files else).
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
if [[ "$card" == *H200* ]]; then
    bash benchmarks/experiments/closing_targets_on_gpu.sh 2>&1 | tail -70
    mkdir -p "$OUT/suite"
    KERNELAB_DIRECT_LAUNCH=1 GPU_SUITE_WORKERS=8 OUT="$OUT/suite" \
        timeout 300 bash benchmarks/gpu_suite.sh d a b c > "$OUT/suite/suite.txt" 2>&1
    echo "suite exit $?"
    tar czf "$OUT/suite.tgz" -C "$OUT" suite && rm -rf "$OUT/suite"
    exit 0
fi
if [ "${STREAM_K:-0}" = 1 ]; then
    bash benchmarks/experiments/stream_k_on_gpu.sh
    exit $?
fi
timeout 200 python3 benchmarks/hgemm_ladder.py --steps 18 --sizes 4096,8192 --modes cold \
    --max-time 0.5 --paired 300 --paired-modes cold --out "$OUT/paired" 2>&1 | tail -25
for run in 1 2; do
    mkdir -p "$OUT/gemm$run"
    OUT="$OUT/gemm$run" timeout 100 python3 benchmarks/pytorch_targets.py --parts gemm 2>&1 |
        grep -E "^(sgemm|hgemm)"
done
