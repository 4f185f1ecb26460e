"""Which half of the L2 each line lives in, from each SM's L2-hit latency to it (l2_sides.cu).

Written in session 17 for the long-row softmax, whose bf16 rows sit at 4.0 TB/s with the
L2's fabric (between its two partitions) 91-95 % busy, as a plain copy's is. If every SM saw
two latencies, one per half, and the halves agreed across SMs and changed only every few
KiB of addresses, a kernel could read only lines of its own SM's half and leave the fabric
to the writes. Nothing here assumes that: the record says what the latencies are.

    PYTHONPATH=src python3 benchmarks/experiments/l2_sides.py --out $OUT

Samples: `--dense` consecutive 128-byte lines from the buffer's start (the fine pattern) and
`--sparse` lines `--sparse-stride` bytes apart (the coarse one, across 2 MiB pages). Two
blocks per SM, one thread each, time `--repeats` dependent loads per line. What it prints:
the latency histogram over all SMs; the two modes and the split between them (the largest
gap in the sorted per-line medians; with one mode that gap is noise, so read the histogram
first); each SM's near fraction; how many SMs agree with the
first SM's near/far split and how many see the opposite (the two sides); and, along the
dense lines, the lengths of the runs of one side (the hash's granularity).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

SOURCE = Path(__file__).with_name("l2_sides.cu")
LINE = 128


def sample_offsets(dense: int, sparse: int, sparse_stride: int) -> list[int]:
    """Byte offsets of the sampled lines: `dense` consecutive lines, then `sparse` lines
    `sparse_stride` apart after them."""
    first_sparse = -(-dense * LINE // sparse_stride) * sparse_stride
    return [i * LINE for i in range(dense)] + [
        first_sparse + i * sparse_stride for i in range(sparse)
    ]


def split_point(latencies: list[float]) -> float:
    """The middle of the widest gap between consecutive sorted latencies: with two modes, the
    threshold between near and far."""
    ordered = sorted(latencies)
    gaps = [(ordered[i + 1] - ordered[i], i) for i in range(len(ordered) - 1)]
    _, i = max(gaps)
    return (ordered[i] + ordered[i + 1]) / 2


def run_lengths(sides: list[bool]) -> Counter:
    """How often each run length of equal consecutive values occurs."""
    runs, length = Counter(), 1
    for previous, current in zip(sides, sides[1:], strict=False):
        if current == previous:
            length += 1
        else:
            runs[length] += 1
            length = 1
    runs[length] += 1
    return runs


def side_agreement(reference: list[bool], sides: list[bool]) -> float:
    return sum(a == b for a, b in zip(reference, sides, strict=True)) / len(reference)


def summarize(per_sm: dict[int, list[float]], n_dense: int) -> dict:
    """Per SM (its median cycles per load on each line): the split, near fractions, sides."""
    every = [c for latencies in per_sm.values() for c in latencies]
    threshold = split_point(every)
    near = {sm: [c < threshold for c in latencies] for sm, latencies in per_sm.items()}
    first = min(near)
    agreement = {sm: side_agreement(near[first], sides) for sm, sides in near.items()}
    same = [sm for sm, a in agreement.items() if a >= 0.9]
    opposite = [sm for sm, a in agreement.items() if a <= 0.1]
    lines_side = near[first]
    return {
        "threshold_cycles": threshold,
        "near_median_cycles": statistics.median(c for c in every if c < threshold),
        "far_median_cycles": statistics.median(c for c in every if c >= threshold),
        "near_fraction_per_sm": {sm: sum(s) / len(s) for sm, s in near.items()},
        "agreement_with_first_sm": agreement,
        "sms_same_side_as_first": sorted(same),
        "sms_opposite_side": sorted(opposite),
        "sms_neither": sorted(set(near) - set(same) - set(opposite)),
        "first_sm": first,
        "first_sm_near_dense": "".join("1" if s else "0" for s in lines_side[:n_dense]),
        "first_sm_near_sparse": "".join("1" if s else "0" for s in lines_side[n_dense:]),
        "dense_run_lengths": dict(sorted(run_lengths(lines_side[:n_dense]).items())),
    }


def main(argv=None) -> int:
    import numpy as np
    import torch

    from kernelab.runtime.cuda.build import build
    from kernelab.runtime.cuda.launch import Launch, launch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--dense", type=int, default=4096)
    parser.add_argument("--sparse", type=int, default=2048)
    parser.add_argument("--sparse-stride", type=int, default=64 << 10)
    parser.add_argument("--repeats", type=int, default=16)
    args = parser.parse_args(argv)

    offsets = sample_offsets(args.dense, args.sparse, args.sparse_stride)
    buffer = torch.zeros((offsets[-1] + LINE) // 8, dtype=torch.int64, device="cuda")
    base = buffer.data_ptr()
    words = torch.tensor(offsets, dtype=torch.int64, device="cuda") // 8
    addresses = base + torch.tensor(offsets, dtype=torch.int64, device="cuda")
    buffer[words] = addresses  # each sampled line's first word: its own address
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks = 2 * sms
    cycles = torch.zeros(blocks * len(offsets), dtype=torch.int32, device="cuda")
    smids = torch.zeros(blocks, dtype=torch.int32, device="cuda")
    built = build(SOURCE, arch="sm_90")
    launch(
        built.cubin, "l2_sides", built.arch, Launch((blocks, 1, 1), (32, 1, 1)),
        addresses.data_ptr(), np.int32(len(offsets)), np.int32(args.repeats),
        cycles.data_ptr(), smids.data_ptr(),
    )  # fmt: skip
    torch.cuda.synchronize()
    per_block = (cycles.view(blocks, -1).double() / args.repeats).tolist()
    per_sm: dict[int, list[list[float]]] = {}
    for smid, latencies in zip(smids.tolist(), per_block, strict=True):
        per_sm.setdefault(smid, []).append(latencies)
    # an SM that ran two blocks: its median per line over them
    medians = {
        sm: [statistics.median(values) for values in zip(*runs, strict=True)]
        for sm, runs in per_sm.items()
    }
    summary = summarize(medians, args.dense)
    histogram = Counter(int(c // 10) * 10 for values in medians.values() for c in values)
    print(f"{len(medians)} SMs, {len(offsets)} lines, {args.repeats} loads each")
    print("cycles per load (bins of 10):", dict(sorted(histogram.items())))
    print(
        f"split at {summary['threshold_cycles']:.1f} cycles: near median "
        f"{summary['near_median_cycles']:.1f}, far {summary['far_median_cycles']:.1f}"
    )
    fractions = sorted(summary["near_fraction_per_sm"].values())
    print(f"near fraction per SM: min {fractions[0]:.3f}, max {fractions[-1]:.3f}")
    print(
        f"SMs on the first SM's side {len(summary['sms_same_side_as_first'])}, opposite "
        f"{len(summary['sms_opposite_side'])}, neither {len(summary['sms_neither'])}"
    )
    runs = summary["dense_run_lengths"]
    print("dense run lengths (lines: count):", dict(list(runs.items())[:20]))
    print("first SM, first 256 dense lines near:", summary["first_sm_near_dense"][:256])
    print("first SM, first 128 sparse lines near:", summary["first_sm_near_sparse"][:128])
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "gpu": torch.cuda.get_device_name(0), "repeats": args.repeats, "offsets": offsets,
        "buffer_address": base, "summary": summary,
        "histogram_bins_of_10_cycles": dict(sorted(histogram.items())),
        # per SM, each line near ("1") or far ("0") of the split; the first SM's latencies
        "near_per_sm": {
            sm: "".join("1" if c < summary["threshold_cycles"] else "0" for c in v)
            for sm, v in medians.items()
        },
        "first_sm_cycles": [round(c, 1) for c in medians[summary["first_sm"]]],
    }  # fmt: skip
    (args.out / "l2_sides.json").write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
