"""Pointer chasing: the unloaded latency of each level, in SM cycles and in nanoseconds.

One thread follows a random single cycle of dependent loads (pointer_chase.cu). The working
set decides where the chain lives:
  l1      16 KiB, one node per 128-byte line, warm pass with ld.global.ca   -> L1 hits
  shared  16 KiB of 4-byte nodes in shared memory                           -> shared memory
  l2      4 MiB (above the 256 KiB L1, far below the L2), ld.global.cg      -> L2 hits
  hbm     1 GiB, nodes 512 bytes apart, L2 flushed, no warm pass, ld.global.cg -> DRAM
For HBM the order matters. A fully random order over 1 GiB lands nearly every load on another
2 MiB page, so each load may also miss the TLB and pay a page walk (the "hbm_tlb" row).
"page-local" order visits the pages in random order and every node of a page, at random,
before the next page: one TLB miss per 4,096 loads, while every load is still a new line of a
set 17 times the L2, so it comes from DRAM. Jia et al. (Dissecting Volta, 2018) and Luo et al.
(Hopper, 2024) warm the TLB for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelab.errors import KernelabError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
GPU_PAGE_BYTES = 2 * MiB  # the page size of large device allocations
SOURCE = "probes/pointer_chase.cu"


@dataclass(frozen=True)
class ChasePlan:
    level: str
    label: str
    kernel: str  # in pointer_chase.cu
    working_set_bytes: int
    stride_bytes: int  # distance between nodes
    steps: int  # timed dependent loads
    warm: bool  # one untimed lap of the cycle first
    page_local: bool = False  # visit every node of a 2 MiB page before the next page
    flush_l2: bool = False

    @property
    def nodes(self) -> int:
        return self.working_set_bytes // self.stride_bytes

    @property
    def order(self) -> str:
        return "page-local random" if self.page_local else "random"


PLANS: tuple[ChasePlan, ...] = (
    ChasePlan("l1", "L1 (ld.global.ca)", "chase_global_ca", 16 * KiB, 128, 100_000, True),
    ChasePlan("shared", "shared memory (ld.shared)", "chase_shared", 16 * KiB, 4, 100_000, True),
    ChasePlan("l2", "L2 (ld.global.cg)", "chase_global_cg", 4 * MiB, 128, 20_000, True),
    ChasePlan(
        "hbm",
        "HBM, page-local order (ld.global.cg)",
        "chase_global_cg",
        GiB,
        512,
        10_000,
        False,
        page_local=True,
        flush_l2=True,
    ),
    ChasePlan(
        "hbm_tlb",
        "HBM, random order: TLB misses too",
        "chase_global_cg",
        GiB,
        512,
        10_000,
        False,
        flush_l2=True,
    ),
)


def visiting_order(nodes: int, *, seed: int = 0, group: int | None = None):
    """A random order of the node indices 0..nodes-1 (a numpy int64 array).

    With `group`, nodes come in runs of `group` consecutive indices (a page): the runs are
    visited in random order and each run's nodes in random order before the next run."""
    import numpy as np

    if nodes < 2:
        raise KernelabError(f"a chase needs at least 2 nodes, got {nodes}")
    rng = np.random.default_rng(seed)
    if group is None or group >= nodes:
        return rng.permutation(nodes).astype(np.int64)
    if group < 1 or nodes % group:
        raise KernelabError(f"{nodes} nodes do not split into groups of {group}")
    pages = rng.permutation(nodes // group)
    within = rng.permuted(np.tile(np.arange(group), (nodes // group, 1)), axis=1)
    return (pages[:, None] * group + within).reshape(-1).astype(np.int64)


def successor_table(order):
    """next[i]: the node after node i when the nodes are visited in `order` and the last leads
    back to the first. Whatever the order, that is one cycle through every node."""
    import numpy as np

    order = np.asarray(order, dtype=np.int64)
    successors = np.empty_like(order)
    successors[order] = np.roll(order, -1)
    return successors


def plan_order(plan: ChasePlan, seed: int = 0):
    group = GPU_PAGE_BYTES // plan.stride_bytes if plan.page_local else None
    return visiting_order(plan.nodes, seed=seed, group=group)


@dataclass(frozen=True)
class ChaseRun:
    cycles: int
    ns: int
    steps: int
    start: int | None  # the first node's device address (None for shared memory)
    last: int  # the address the chase ended on

    @property
    def cycles_per_load(self) -> float:
        return self.cycles / self.steps

    @property
    def ns_per_load(self) -> float:
        return self.ns / self.steps


def _flush_l2(torch, l2_bytes: int) -> None:
    from kernelab.harness.timing import flush_size_bytes

    scratch = torch.empty(flush_size_bytes(l2_bytes) // 4, dtype=torch.int32, device="cuda")
    scratch.zero_()
    torch.cuda.synchronize()


def run_chase(plan: ChasePlan, *, l2_bytes: int, repeats: int = 3, seed: int = 0) -> list[ChaseRun]:
    """Launch `plan`'s chase `repeats` times on the current GPU; one ChaseRun per launch.

    HBM repeats start a lap apart (`steps` nodes further along the order), on lines the
    previous repeat did not touch, with the L2 flushed before each."""
    import numpy as np
    import torch

    from kernelab.runtime.cuda.build import build
    from kernelab.runtime.cuda.launch import Launch, launch

    built = build(SOURCE)
    order = plan_order(plan, seed)
    successors = successor_table(order)
    result = torch.zeros(3, dtype=torch.int64, device="cuda")
    warm_steps = plan.nodes if plan.warm else 0
    runs = []
    if plan.kernel == "chase_shared":
        table = torch.from_numpy(successors.astype(np.int32)).cuda()
        config = Launch((1, 1, 1), (256, 1, 1), shared_bytes=plan.nodes * 4)
        for _ in range(repeats):
            launch(
                built.cubin,
                plan.kernel,
                built.arch,
                config,
                table.data_ptr(),
                np.int32(plan.nodes),
                np.int32(warm_steps),
                np.int32(plan.steps),
                result.data_ptr(),
            )
            runs.append(_read(torch, result, plan.steps, start=None))
        return runs

    # The chain: 8-byte words, the word at each node holding the address of the next node.
    words_per_node = plan.stride_bytes // 8
    chain = torch.zeros(plan.working_set_bytes // 8, dtype=torch.int64, device="cuda")
    base = chain.data_ptr()
    node_words = torch.arange(plan.nodes, dtype=torch.int64, device="cuda") * words_per_node
    chain[node_words] = base + torch.from_numpy(successors).cuda() * plan.stride_bytes
    del node_words
    for repeat in range(repeats):
        start = base + int(order[(repeat * plan.steps) % plan.nodes]) * plan.stride_bytes
        if plan.flush_l2:
            _flush_l2(torch, l2_bytes)
        launch(
            built.cubin,
            plan.kernel,
            built.arch,
            Launch((1, 1, 1), (1, 1, 1)),
            np.uint64(start),
            np.int32(warm_steps),
            np.int32(plan.steps),
            result.data_ptr(),
        )
        runs.append(_read(torch, result, plan.steps, start=start))
    del chain
    return runs


def _read(torch, result, steps: int, *, start: int | None) -> ChaseRun:
    torch.cuda.synchronize()
    cycles, ns, last = (value % 2**64 for value in result.tolist())  # int64 -> unsigned
    if start is not None and last == 0:  # a zero word: the chain is broken, no chase happened
        raise KernelabError("pointer chase reached a null address: the chain is broken")
    return ChaseRun(cycles=int(cycles), ns=int(ns), steps=steps, start=start, last=int(last))
