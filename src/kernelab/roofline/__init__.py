"""The roofline: op costs (FLOPs, minimum bytes), their place under a GPU's ceilings, the chart."""

from __future__ import annotations

from kernelab.roofline.costs import COST_MODELS, OpCost, dtype_bytes
from kernelab.roofline.model import Ceilings, Placement, place
from kernelab.roofline.plot import plot_roofline

__all__ = [
    "COST_MODELS",
    "Ceilings",
    "OpCost",
    "Placement",
    "dtype_bytes",
    "place",
    "plot_roofline",
]
