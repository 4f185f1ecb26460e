#!/usr/bin/env bash
# Session 25: triton.matmul's targets in four fresh processes (each tunes again) with the
# autotuners ranking by device time (_runtime.autotuner_bench), then the matmul and
# vector_add GPU tests. Run from the repository root; JSON per run under $OUT/r<n>/.
export PYTHONPATH=src KERNELAB_CACHE=$PWD/.kernelab-cache
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2 3 4; do echo "== run $i"; OUT=$OUT/r$i timeout 70 python3 benchmarks/pytorch_targets.py --parts triton 2>&1 | grep -E "^triton.matmul" ; done
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_triton_kernels.py -k "matmul or vector" 2>&1 | tail -3
