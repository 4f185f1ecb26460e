"""Lenses: CPU-computable views of a kernel's resources, each answering one question.

occupancy  how many blocks fit on an SM, and which resource stops more
tile       what a GEMM tiling costs (shared memory, registers) and what reuse it buys
banks      how many shared-memory wavefronts one warp's access takes, and the padding cure
pipeline   Little's law: bytes (or MMA work) in flight to hide memory latency
"""

from __future__ import annotations

from kernelab.lenses.banks import BankReport, bank_conflicts, warp_wavefronts
from kernelab.lenses.occupancy import LaunchDoesNotFit, Occupancy, occupancy
from kernelab.lenses.pipeline import (
    bytes_in_flight_needed,
    kernel_in_flight,
    memory_pipeline,
    stages_to_hide_latency,
    tensor_core_pipeline,
)
from kernelab.lenses.tile import TileAnalysis, TileConfig, analyze_tile, ladder_tiles

__all__ = [
    "BankReport",
    "LaunchDoesNotFit",
    "Occupancy",
    "TileAnalysis",
    "TileConfig",
    "analyze_tile",
    "bank_conflicts",
    "bytes_in_flight_needed",
    "kernel_in_flight",
    "ladder_tiles",
    "memory_pipeline",
    "occupancy",
    "stages_to_hide_latency",
    "tensor_core_pipeline",
    "warp_wavefronts",
]
