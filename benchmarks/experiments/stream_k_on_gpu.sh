#!/usr/bin/env bash
# Step 19 (stream-K over the last partial wave) against step 18 and cuBLAS, one device call
# (~60 s on an H100):
#   1. its GPU tests (stream_k_tests.sh);
#   2. if they pass: the ladder's check and cold timing of steps 18 and 19 beside cuBLAS, then
#      300 cold pairs each at 2048^3, 4096^3 and 8192^3 (where the split shares nothing, 2048^3
#      and 4096^3, the launcher runs step 18's kernel);
#   3. triton.testing.do_bench, 19 and 18 against torch.mm, three rounds at 4096^3 and 8192^3;
#   4. the issue's gemm targets with step 19 (pytorch_targets.py --hgemm-step hgemm:19).
# Its first run (session 27) tested the prediction x1.015 over 18 at 4096^3 and x1.025 at
# 8192^3: x0.944 and x1.024 (docs/notes/hgemm.md, step 19). Carry .kernelab-cache built with
# `hgemm_ladder.py --steps 18,19 --prebuild`. Outputs in $OUT/results.tgz.
set -u -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=src KERNELAB_CACHE=${KERNELAB_CACHE:-$PWD/.kernelab-cache}
source benchmarks/experiments/packed_steps.sh  # out, pack, step: all into $OUT/results.tgz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader

source benchmarks/experiments/stream_k_tests.sh
stream_k_tests

step "ladder: 18 and 19, cold, then pairs"
timeout 200 python3 benchmarks/hgemm_ladder.py --steps 18,19 --sizes 2048,4096,8192 \
    --modes cold --max-time 0.5 --paired 300 --paired-modes cold --out "$out/ladder" \
    > "$out/ladder.txt" 2>&1
tail -20 "$out/ladder.txt"

step "do_bench"
timeout 90 python3 - > "$out/do_bench.txt" 2>&1 <<'PY'
import torch, triton.testing as tt
from kernelab.ladders.hgemm import hgemm
for n in (4096, 8192):
    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    for round_ in range(3):
        base = tt.do_bench(lambda: torch.mm(a, b))
        ours = {s: tt.do_bench(lambda s=s: hgemm(s, a, b)) for s in (18, 19)}
        print(f"{n}^3 round {round_}: cuBLAS {base * 1e3:.1f} us, "
              + ", ".join(f"hgemm:{s} {ms * 1e3:.1f} us ({base / ms * 100:.2f} %)"
                          for s, ms in ours.items()))
PY
cat "$out/do_bench.txt"
step "the gemm targets with step 19 (pytorch_targets.py --hgemm-step hgemm:19)"
mkdir -p "$out/targets"
OUT="$out/targets" timeout 90 python3 benchmarks/pytorch_targets.py --parts gemm \
    --hgemm-step hgemm:19 > "$out/targets.txt" 2>&1
grep -E "^(sgemm|hgemm)" "$out/targets.txt"
step "done"
pack
