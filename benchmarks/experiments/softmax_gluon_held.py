"""The held-row softmax (ops/softmax/held.py) at any configuration, beside the library.

The library's held kernel is the deferred exchange with the row a program finishes held in
shared memory as its input values, its exps taken again at the finish (its docstring has
the design). It is offered only where it won (bf16 rows of 262K-1M values, c4096 w2); this
script times it at any chunk, warps, L2 prefetch (L2_AHEAD rows ahead, the first
1 / L2_PART of each chunk) and register cap, any dtype and row length of whole chunks, checked against the float64 reference (3 fresh inputs) and timed
cold beside the library's tuned softmax:

    PYTHONPATH=src python3 benchmarks/experiments/softmax_gluon_held.py --out $OUT \
        --dtypes bf16,fp32 --cols 131072,262144 \
        --configs '[{"CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1, "maxnreg": 128}]'

fp32 rows are worth keeping in a run for the check: its tolerance catches a wrong scale
that bf16's can hide (session 11's inline-PTX poll).

History (H200; gpu-log.md sessions 11-13; records experiments/softmax_gluon_held_v1..v15):
session 11 wrote it at c2048 one warp (v1: bf16 262K 3.833 without the L2 prefetch against
the library's 3.799). Session 12 found c4096 w2 with the prefetch, 3.851-3.866 at bf16 262K
in four runs against 3.762-3.798, and moved it into the library. Three variants measured
beside it lost, and were removed (their code is in commit c74f337, this file):
  STAGED (the next rows' chunks by cp.async into a third buffer, two rows ahead, no L2
    prefetch): bf16 262K c2048 3.794, c4096 w2 3.827, c4096 w4 3.840 against 3.851-3.863;
  HOLD_EXPS (the fp32 exps held instead of the inputs, so no second ex2 at the finish: 27 %
    fewer SASS instructions at bf16 c4096 w2, same 168 registers, twice the shared memory):
    bf16 262K 3.590 against 3.857, 131K 3.768 against 3.920;
  PAD_SLOTS (unused buffers that only move the shared-memory carveout, so shrink the L1):
    two slots cost 1.4-1.6 % at c4096 w2 (6 programs per SM either way), and 13-16 % at
    c2048 w1, where they also cut the programs per SM from 16 to 13.
Session 13 found c8192 w4 (3.893-3.911 in six runs, v10-v15), now the library's first config,
and measured beside it: the first half of each chunk prefetched (L2_PART 2, still in the
library: -2.5 % at 262K, v8), fewer programs per SM than fit (PER_SM: -10 to -13 %, v9-v10),
two rows ahead (L2_AHEAD 2: -7 %, v13-v15) and one bulk L2 prefetch per chunk (L2_BULK: a
tie, v14-v15).
Session 14 (v16, in a log: the JSON did not come back) measured SPREAD_POLL, the polled
words one per thread so that only the first warp's lanes load them (at c8192 w4 each of the
four warps otherwise reads all 32 words, 1 KiB a poll): bf16 262K 3.818 against 3.906
unspread, 131K 3.821 against 3.865; wider shapes spread 2.48-3.55. The combine across warps
(31 BAR.SYNC in the SASS against 7) costs more than the poll's L2 reads; removed (664e240).
c16384 w4 (v17: 255 registers, 2 programs per SM) lost by 11 % at 262K (3.464 against
3.888) and 131K (3.531 against 3.895).
"""

from __future__ import annotations

import torch

from kernelab.ops.softmax import held as held

CONFIGS = (
    {"CHUNK": 8192, "num_warps": 4, "L2_AHEAD": 1},
    {"CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1},
    {"CHUNK": 4096, "num_warps": 2, "L2_AHEAD": 1, "maxnreg": 128},
    {"CHUNK": 2048, "num_warps": 1, "L2_AHEAD": 0},
    {"CHUNK": 4096, "num_warps": 4, "L2_AHEAD": 1},
)


def launch(x, config: dict):
    """Softmax of a 2-D x of whole chunks with the library's held kernel at this config, not
    only where the library offers it; (out, plan)."""
    assert x.stride(1) == 1 and x.shape[1] % config["CHUNK"] == 0
    assert x.shape[1] // config["CHUNK"] <= held.MOST_CHUNKS
    config = {"path": "held", **config}
    out = torch.empty_like(x)
    if not held._launch(x, out, config):
        raise ValueError(f"not resident: {config}")
    return out, held.plan(x, config)


def main(argv=None) -> int:
    from softmax_gluon_rows import compare_main  # this folder's script

    def label(config: dict) -> str:
        cap = f" r{config['maxnreg']}" if config.get("maxnreg") else ""
        part = f" l2/{config['L2_PART']}" if config.get("L2_PART", 1) > 1 else ""
        knobs = f"c{config['CHUNK']} w{config['num_warps']} l2a{config.get('L2_AHEAD', 1)}"
        # (records v9-v10 also name " ps<N>", PER_SM, v14-v15 " bulk<N>", L2_BULK, and v16
        # " spread", SPREAD_POLL: removed, their code is in 478b569, f08ddbd and 664e240)
        return f"held {knobs}{part}{cap}"

    description = __doc__.splitlines()[0]
    return compare_main(argv, description, CONFIGS, label, launch, "softmax_gluon_held.json")


if __name__ == "__main__":
    raise SystemExit(main())
