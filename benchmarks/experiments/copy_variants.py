"""Which copy kernel matches torch's copy on this GPU (issue 9's 5 % test)?

Times torch's dst.copy_(src) and every variant of copy_variants.cu on the same 2 GiB buffers,
cold L2, in one run; prints GB/s (read + write counted) and the ratio to torch's copy.
Usage (on a GPU): PYTHONPATH=src python3 benchmarks/experiments/copy_variants.py [--out F]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

SOURCE = Path(__file__).with_name("copy_variants.cu")
GIB = 1024**3


def main() -> None:
    import torch

    from kernelab.runtime.cuda.build import build

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--prebuild", action="store_true")
    args = parser.parse_args()

    variants = [
        dict(UNROLL=u, STREAMING=s, CONTIGUOUS=c)
        for u, s, c in itertools.product((2, 4, 8), (0, 1), (0, 1))
    ]
    builds = [build(SOURCE, arch="sm_90", defines=v) for v in variants]
    if args.prebuild:
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for pattern in ("random", "ones"):
        rows += _time_pattern(pattern, variants, builds, sms, 2 * GIB)
        torch.cuda.empty_cache()
    for row in rows:
        print(
            f"{row['pattern']:7s} {row['kernel']:32s} {row['gbps']:8.1f} GB/s {row['ratio']:6.3f}"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def _time_pattern(pattern: str, variants, builds, sms: int, buffer_bytes: int) -> list[dict]:
    """Torch's copy and every variant on one pair of buffers filled with `pattern`."""
    import numpy as np
    import torch

    from kernelab.harness.timing import benchmark
    from kernelab.runtime.cuda.launch import Launch, launch

    src = torch.empty(buffer_bytes // 4, dtype=torch.int32, device="cuda")
    src.random_() if pattern == "random" else src.fill_(1)
    dst = torch.empty_like(src)
    n_vectors = src.numel() // 4
    traffic = 2 * buffer_bytes  # every byte read once and written once

    def rate(timing) -> float:
        return traffic / (timing.median_ms * 1e-3) / 1e9

    torch_rate = rate(benchmark(lambda: dst.copy_(src), mode="cold", max_time_s=1.0))
    rows = [dict(pattern=pattern, kernel="torch copy_", gbps=torch_rate, ratio=1.0)]
    for v, built in zip(variants, builds, strict=True):
        for threads, blocks_per_sm in ((128, 0), (256, 0), (512, 4), (256, 8), (1024, 2)):
            if v["CONTIGUOUS"] != (blocks_per_sm == 0):
                continue  # contiguous tiles: the grid covers the buffer once; else resident
            if v["CONTIGUOUS"]:
                blocks = -(-n_vectors // (threads * v["UNROLL"]))
            else:
                blocks = sms * blocks_per_sm
            config = Launch((blocks, 1, 1), (threads, 1, 1))

            def call(built=built, config=config):
                launch(
                    built.cubin,
                    "copy_variant",
                    built.arch,
                    config,
                    src.data_ptr(),
                    dst.data_ptr(),
                    np.int64(n_vectors),
                )

            dst.zero_()
            call()
            torch.cuda.synchronize()
            if not torch.equal(dst, src):
                raise SystemExit(f"variant {v} {threads}x{blocks} copied wrongly")
            r = rate(benchmark(call, mode="cold", max_time_s=0.6))
            name = (
                f"u{v['UNROLL']} {'cs' if v['STREAMING'] else 'wb'} "
                f"{'tile' if v['CONTIGUOUS'] else 'grid'} {threads}t {blocks_per_sm or '-'}b/SM"
            )
            rows.append(
                dict(pattern=pattern, kernel=name, gbps=r, ratio=r / torch_rate,
                     threads=threads, blocks=blocks, **v)
            )  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
