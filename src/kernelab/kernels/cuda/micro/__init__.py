"""Microbenchmarks of the memory hierarchy: pointer-chasing latency (pointer_chase.cu,
chase.py) and per-level bandwidth (bandwidth.cu, bandwidth.py). The measurements and their
record are kernelab.lenses.hierarchy; nothing here touches CUDA at import time."""

SOURCE_DIR = "micro"  # relative to kernels/cuda, where build.source_path looks
