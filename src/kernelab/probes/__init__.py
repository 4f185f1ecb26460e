"""Microbenchmarks of the memory hierarchy: pointer-chasing latency (pointer_chase.cu,
chase.py) and per-level bandwidth (bandwidth.cu, bandwidth.py). hierarchy.py runs them into
the record that kernelab.lenses.hierarchy renders; nothing here touches CUDA at import time."""

SOURCE_DIR = "probes"  # relative to the kernelab package, where build.source_path looks
