"""The persistent row-tile loop the row-wise ops share (softmax.rows, norms).

A program takes tiles of ROWS rows: one tile (PERSISTENT=False, a grid of one program per
tile) or every num_programs-th tile (PERSISTENT=True, a grid of what fits the GPU at once),
so the kernels iterate `for tile in tl.range(*row_tiles(n_rows, ROWS, PERSISTENT), ...)`.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def row_tiles(n_rows, ROWS: tl.constexpr, PERSISTENT: tl.constexpr):
    """(first, last, step) of this program's tiles of ROWS rows."""
    if PERSISTENT:
        return tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0)
    else:
        return tl.program_id(0), tl.program_id(0) + 1, 1
