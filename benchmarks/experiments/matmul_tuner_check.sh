export PYTHONPATH=src KERNELAB_CACHE=$PWD/.kernelab-cache
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2 3 4; do echo "== run $i"; OUT=$OUT/r$i timeout 70 python3 benchmarks/pytorch_targets.py --parts triton 2>&1 | grep -E "^triton.matmul" ; done
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_triton_kernels.py -k "matmul or vector" 2>&1 | tail -3
