"""The tile lens: what a GEMM tiling costs in shared memory and registers, what reuse it
buys at each level of the hierarchy, and how its blocks fill the GPU.

A block computes a BM x BN tile of C, walking K in steps of BK: each step stages an A tile
(BM x BK) and a B tile (BK x BN) in shared memory (`stages` of them when loads are
pipelined). Its warps split the block tile into WM x WN warp tiles, and each thread
accumulates TM x TN outputs per pass from TM values of A and TN values of B in registers.

Reuse is FLOPs per element (or byte) fetched from the level below:
  global -> shared   2*BM*BN*BK / ((BM*BK + BK*BN) * bytes) = 2*BM*BN / ((BM + BN) * bytes)
  shared -> regs     2*TM*TN / (TM + TN) per thread: a 1D tile (8x1) gives 16/9 = 1.8, a
                     2D tile (8x8) 128/16 = 8, which is why 2D thread tiles win.
  warp tile          2*WM*WN / (WM + WN) per distinct shared-memory element the warp reads.
The block figure assumes every block's loads come from DRAM (no L2 reuse between blocks),
so it is the worst case; compare it with the ridge of the math the kernel uses.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from kernelab.errors import KernelabError
from kernelab.hardware.specs import GPUSpec
from kernelab.lenses.occupancy import MAX_REGISTERS_PER_THREAD, Occupancy, occupancy
from kernelab.roofline.costs import MAX_COUNT, canonical_dtype, count_text, dtype_bytes

# Registers a SIMT GEMM thread needs beyond its accumulators and fragments: global and
# shared pointers, loop counters, indices. A rough allowance, used only for the estimate.
REGISTER_OVERHEAD_ESTIMATE = 20

# How an error names a vendor that the occupancy model does not cover.
_VENDOR_PART = {"amd": "an AMD part", "apple": "an Apple part"}


@dataclass(frozen=True)
class TileConfig:
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    threads: int
    wm: int | None = None
    wn: int | None = None
    dtype: str = "fp32"  # the inputs as stored in shared memory
    stages: int = 1  # shared-memory buffers of (A tile, B tile): 2 = double buffering
    a_pad: int = 0  # elements added to every row of the A tile in shared memory
    b_pad: int = 0  # and of the B tile
    a_transposed: bool = False  # A stored as BK x BM (transposed, for float4 reads along M)
    registers: int | None = None  # per thread, from ptxas -v when known
    # None: fp64 for fp64 inputs (an fp64 GEMM accumulates in fp64), fp32 for the rest
    acc_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.acc_dtype is None:
            try:
                wide = canonical_dtype(self.dtype) == "fp64"
            except KernelabError:  # validate() names the unknown dtype
                wide = False
            object.__setattr__(self, "acc_dtype", "fp64" if wide else "fp32")

    def validate(self, warp_size: int = 32) -> None:
        """KernelabError naming the first thing that makes this tiling impossible."""
        for name in ("bm", "bn", "bk", "tm", "tn", "threads", "stages"):
            value = getattr(self, name)
            if value <= 0:
                raise KernelabError(f"{name.upper()} must be positive, got {count_text(value)}")
        for name in ("bm", "bn", "bk", "tm", "tn", "threads", "stages", "a_pad", "b_pad",
                     "wm", "wn", "registers"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and value > MAX_COUNT:
                raise KernelabError(f"{name.upper()} must be at most 2**53 = {MAX_COUNT}, got "
                                    f"{count_text(value)}")  # fmt: skip
        if self.a_pad < 0 or self.b_pad < 0:
            raise KernelabError("shared-memory padding cannot be negative")
        if self.threads % warp_size:
            raise KernelabError(
                f"threads per block ({self.threads}) must be a multiple of the warp size "
                f"({warp_size})"
            )
        if self.bm % self.tm or self.bn % self.tn:
            raise KernelabError(
                f"the {self.bm}x{self.bn} block tile does not divide into {self.tm}x{self.tn} "
                "thread tiles"
            )
        outputs = self.bm * self.bn
        if outputs % (self.threads * self.tm * self.tn):
            raise KernelabError(
                f"{self.threads} threads with {self.tm}x{self.tn} thread tiles cannot cover "
                f"the {self.bm}x{self.bn} block tile evenly ({outputs} outputs)"
            )
        if (self.wm is None) != (self.wn is None):
            raise KernelabError("give both WM and WN, or neither")
        if self.wm is not None and self.wn is not None:
            if self.wm <= 0 or self.wn <= 0:
                raise KernelabError(f"WM and WN must be positive, got {self.wm}x{self.wn}")
            if self.bm % self.wm or self.bn % self.wn:
                raise KernelabError(
                    f"the {self.bm}x{self.bn} block tile does not divide into "
                    f"{self.wm}x{self.wn} warp tiles"
                )
            warp_tiles = (self.bm // self.wm) * (self.bn // self.wn)
            if warp_tiles != self.threads // warp_size:
                raise KernelabError(
                    f"{warp_tiles} warp tiles of {self.wm}x{self.wn} but "
                    f"{self.threads // warp_size} warps in the block"
                )
            if (self.wm * self.wn) % (warp_size * self.tm * self.tn):
                raise KernelabError(
                    f"a {self.wm}x{self.wn} warp tile does not divide among {warp_size} "
                    f"threads of {self.tm}x{self.tn}"
                )
        canonical_dtype(self.dtype)
        canonical_dtype(self.acc_dtype)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Waves:
    """How the problem's blocks fill the GPU: whole waves and the tail."""

    m: int
    n: int
    k: int
    blocks: int
    slots: int  # blocks resident at once on the whole GPU: blocks_per_sm x SMs
    waves: float
    full_waves: int
    tail_blocks: int  # blocks in the last, partial wave (0 when it is full)
    tail_idle_fraction: float  # of the last wave's slots, the share left idle
    wave_efficiency: float  # blocks / (waves rounded up x slots): busy share of slot-time
    tile_utilization: float  # useful FLOPs / FLOPs of the padded tiles at the edges
    tiled_global_bytes: float  # every block loads its A and B panels from DRAM, C written once
    tiled_intensity: float  # useful FLOPs / tiled_global_bytes
    min_bytes: float  # the cost model's minimum: A, B read once, C written once

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TileAnalysis:
    gpu: str
    config: TileConfig
    smem_a_bytes: int  # one stage
    smem_b_bytes: int
    smem_per_block_bytes: int  # all stages
    outputs_per_thread: int
    registers_per_thread: int
    registers_source: str  # "given" (ptxas) or "estimate"
    occupancy: Occupancy
    block_flops_per_global_byte: float
    thread_flops_per_smem_load: float
    thread_flops_per_smem_byte: float
    warp_flops_per_smem_element: float | None
    math_dtype: str
    ridge: float  # FLOP/byte of DRAM where the math ceiling starts
    block_bound: str  # "memory" or "compute" with no L2 reuse between blocks
    waves: Waves | None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "config": self.config.to_dict(),
            "smem_a_bytes": self.smem_a_bytes,
            "smem_b_bytes": self.smem_b_bytes,
            "smem_per_block_bytes": self.smem_per_block_bytes,
            "outputs_per_thread": self.outputs_per_thread,
            "registers_per_thread": self.registers_per_thread,
            "registers_source": self.registers_source,
            "occupancy": self.occupancy.to_dict(),
            "reuse": {
                "block_flops_per_global_byte": self.block_flops_per_global_byte,
                "thread_flops_per_smem_load": self.thread_flops_per_smem_load,
                "thread_flops_per_smem_byte": self.thread_flops_per_smem_byte,
                "warp_flops_per_smem_element": self.warp_flops_per_smem_element,
            },
            "math_dtype": self.math_dtype,
            "ridge": self.ridge,
            "block_bound": self.block_bound,
            "waves": self.waves.to_dict() if self.waves else None,
            "notes": list(self.notes),
        }


def thread_tile_reuse(tm: int, tn: int) -> float:
    """FLOPs per shared-memory load of a TM x TN thread tile: 2*TM*TN / (TM + TN)."""
    return 2 * tm * tn / (tm + tn)


def block_tile_reuse(bm: int, bn: int, dtype: str = "fp32") -> float:
    """FLOPs per byte loaded from global memory by a BM x BN block tile."""
    return 2 * bm * bn / ((bm + bn) * dtype_bytes(dtype))


def smem_bytes(config: TileConfig) -> tuple[int, int, int]:
    """(A tile, B tile, whole block) shared-memory bytes; the block holds `stages` pairs."""
    elem = dtype_bytes(config.dtype)
    if config.a_transposed:
        a_elems = config.bk * (config.bm + config.a_pad)
    else:
        a_elems = config.bm * (config.bk + config.a_pad)
    b_elems = config.bk * (config.bn + config.b_pad)
    a_bytes = math.ceil(a_elems * elem)
    b_bytes = math.ceil(b_elems * elem)
    return a_bytes, b_bytes, (a_bytes + b_bytes) * config.stages


def register_estimate_parts(config: TileConfig) -> tuple[int, int, int]:
    """(accumulator, fragment, overhead) registers of a SIMT GEMM thread, in 32-bit registers:
    a value takes one register, or two when it is 8 bytes wide (fp64)."""
    words_per_acc = max(1, math.ceil(dtype_bytes(config.acc_dtype) / 4))
    words_per_frag = max(1, math.ceil(dtype_bytes(config.dtype) / 4))
    outputs = config.bm * config.bn // config.threads
    return (
        outputs * words_per_acc,
        (config.tm + config.tn) * words_per_frag,
        REGISTER_OVERHEAD_ESTIMATE,
    )


def estimate_registers(config: TileConfig) -> int:
    """Per-thread registers of a SIMT GEMM thread: accumulators + A/B fragments + overhead.
    An estimate: ptxas decides, and warp-tile iterations hold more fragments than this."""
    return sum(register_estimate_parts(config))


def _register_note(config: TileConfig, registers: int) -> str:
    """How the estimate adds up, in registers, with each part's values and their width."""
    accumulators, fragments, overhead = register_estimate_parts(config)
    outputs, values = config.bm * config.bn // config.threads, config.tm + config.tn

    def part(regs: int, count: int, what: str, dtype: str) -> str:
        per = regs // count
        return f"{regs} for {count} {dtype} {what}" + (f" ({per} each)" if per > 1 else "")

    return (
        f"registers per thread estimated at {registers} ("
        f"{part(accumulators, outputs, 'accumulators', canonical_dtype(config.acc_dtype))} + "
        f"{part(fragments, values, 'fragment values', canonical_dtype(config.dtype))} + "
        f"{overhead} overhead); give --regs from ptxas -v for the real count"
    )


def _waves(config: TileConfig, spec: GPUSpec, blocks_per_sm: int, m: int, n: int, k: int) -> Waves:
    from kernelab.roofline.costs import gemm

    for name, value in (("M", m), ("N", n), ("K", k)):
        if value <= 0:
            raise KernelabError(f"{name} must be positive, got {count_text(value)}")
        if value > MAX_COUNT:
            raise KernelabError(f"{name} must be at most 2**53 = {MAX_COUNT}, got "
                                f"{count_text(value)}")  # fmt: skip
    tiles_m, tiles_n, steps_k = -(-m // config.bm), -(-n // config.bn), -(-k // config.bk)
    blocks = tiles_m * tiles_n
    slots = blocks_per_sm * spec.sm_count
    rounds = -(-blocks // slots)
    tail = blocks % slots
    elem = dtype_bytes(config.dtype)
    useful_flops = 2.0 * m * n * k
    padded_flops = 2.0 * tiles_m * config.bm * tiles_n * config.bn * steps_k * config.bk
    # Each block streams its A panel (BM x K) and B panel (K x BN); C is written once.
    tiled_bytes = blocks * (config.bm + config.bn) * steps_k * config.bk * elem + m * n * elem
    return Waves(
        m=m,
        n=n,
        k=k,
        blocks=blocks,
        slots=slots,
        waves=blocks / slots,
        full_waves=blocks // slots,
        tail_blocks=tail,
        tail_idle_fraction=(slots - tail) / slots if tail else 0.0,
        wave_efficiency=blocks / (rounds * slots),
        tile_utilization=useful_flops / padded_flops,
        tiled_global_bytes=tiled_bytes,
        tiled_intensity=useful_flops / tiled_bytes,
        min_bytes=gemm(m, n, k, dtype=config.dtype, out_dtype=config.dtype).bytes,
    )


def analyze_tile(
    config: TileConfig,
    spec: GPUSpec,
    *,
    m: int | None = None,
    n: int | None = None,
    k: int | None = None,
    math_dtype: str | None = None,
) -> TileAnalysis:
    """Shared memory, registers, occupancy, reuse and (given M, N, K) waves of a tiling.

    math_dtype picks the compute ceiling for the ridge: by default the input dtype's own
    rate, which for fp32 is the SIMT (FFMA) rate the SGEMM ladder runs at.
    """
    config.validate(spec.warp_size)
    if spec.vendor != "nvidia":
        part = _VENDOR_PART.get(spec.vendor, f"not an NVIDIA part ({spec.vendor})")
        raise KernelabError(f"the tile lens's occupancy model covers NVIDIA GPUs; {spec.id} is "
                            f"{part}")  # fmt: skip
    notes: list[str] = []
    a_bytes, b_bytes, smem_total = smem_bytes(config)
    outputs = config.bm * config.bn // config.threads

    if config.registers is not None:
        registers, source = config.registers, "given"
    else:
        registers, source = estimate_registers(config), "estimate"
        notes.append(_register_note(config, registers))
        if registers > MAX_REGISTERS_PER_THREAD:
            notes.append(
                f"the estimate exceeds {MAX_REGISTERS_PER_THREAD} registers: ptxas would spill "
                "to local memory; occupancy assumes the cap"
            )
            registers = MAX_REGISTERS_PER_THREAD

    occ = occupancy(
        spec,
        threads_per_block=config.threads,
        registers_per_thread=registers,
        smem_per_block_bytes=smem_total,
    )

    elem = dtype_bytes(config.dtype)
    block_reuse = block_tile_reuse(config.bm, config.bn, config.dtype)
    thread_reuse = thread_tile_reuse(config.tm, config.tn)
    warp_reuse = None
    if config.wm is not None and config.wn is not None:
        warp_reuse = 2 * config.wm * config.wn / (config.wm + config.wn)

    if outputs > config.tm * config.tn:
        notes.append(
            f"each thread iterates its {config.tm}x{config.tn} tile "
            f"{outputs // (config.tm * config.tn)} times; when those passes share fragments "
            f"the shared->register reuse is higher than the {thread_reuse:.2f} of one pass"
        )

    mdtype = canonical_dtype(math_dtype or config.dtype)
    if mdtype not in spec.peak_tflops:
        raise KernelabError(f"{spec.id} has no {mdtype} peak rate in the catalog")
    ridge = spec.ridge(mdtype)
    bound = "compute" if block_reuse >= ridge else "memory"
    if bound == "memory":
        notes.append(
            f"a {config.bm}x{config.bn} block tile reuses each global byte {block_reuse:.1f} "
            f"times, below the {mdtype} ridge of {ridge:.1f} FLOP/byte: unless L2 serves "
            "repeated panels, DRAM limits it; grow BM and BN"
        )

    waves = None
    given = [v is not None for v in (m, n, k)]
    if any(given):
        if not all(given):
            raise KernelabError("give all of M, N and K for the wave analysis, or none")
        waves = _waves(config, spec, occ.blocks_per_sm, m, n, k)  # type: ignore[arg-type]
        if waves.tail_blocks and waves.waves < 4:
            notes.append(
                f"{waves.waves:.2f} waves: the last wave leaves "
                f"{100 * waves.tail_idle_fraction:.0f}% of the slots idle, costing about "
                f"{100 * (1 - waves.wave_efficiency):.0f}% of the time"
            )

    return TileAnalysis(
        gpu=spec.id,
        config=config,
        smem_a_bytes=a_bytes,
        smem_b_bytes=b_bytes,
        smem_per_block_bytes=smem_total,
        outputs_per_thread=outputs,
        registers_per_thread=registers,
        registers_source=source,
        occupancy=occ,
        block_flops_per_global_byte=block_reuse,
        thread_flops_per_smem_load=thread_reuse,
        thread_flops_per_smem_byte=thread_reuse / elem,
        warp_flops_per_smem_element=warp_reuse,
        math_dtype=mdtype,
        ridge=ridge,
        block_bound=bound,
        waves=waves,
        notes=tuple(notes),
    )


def _whole(value) -> int | None:
    """An integer tile parameter, or None for an absent or non-numeric one ("tuned")."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def tile_config_from_metadata(metadata: dict, *, dtype: str = "fp32") -> TileConfig | None:
    """A TileConfig from an Implementation's metadata (its "tiles" entry when it has one:
    BM, BN, BK, threads, and TM, TN, WM, WN, stages, A_pad, B_pad, registers where they
    apply), or None when it declares no fixed tile (untiled, or chosen by autotuning)."""
    tiles = metadata.get("tiles", metadata)
    if not isinstance(tiles, dict):
        return None
    value = {key: _whole(tiles.get(key)) for key in ("BM", "BN", "BK", "threads")}
    if any(v is None for v in value.values()):
        return None
    optional = {}
    for key in ("TM", "TN", "WM", "WN", "stages", "A_pad", "B_pad", "registers"):
        raw = tiles.get(key, metadata.get(key) if key == "registers" else None)
        if raw is None:
            continue
        if _whole(raw) is None:
            return None  # a parameter left to the autotuner
        optional[key] = _whole(raw)
    pad = _whole(tiles.get("smem_pad")) or 0
    return TileConfig(
        bm=value["BM"],  # type: ignore[arg-type]
        bn=value["BN"],  # type: ignore[arg-type]
        bk=value["BK"],  # type: ignore[arg-type]
        tm=optional.get("TM", 1),  # an untiled thread computes one output
        tn=optional.get("TN", 1),
        threads=value["threads"],  # type: ignore[arg-type]
        wm=optional.get("WM"),
        wn=optional.get("WN"),
        dtype=dtype,
        stages=optional.get("stages", 1),
        a_pad=optional.get("A_pad", pad),
        b_pad=optional.get("B_pad", pad),
        a_transposed=bool(tiles.get("a_transposed", False)),
        registers=optional.get("registers"),
    )


def kernel_tile(name: str) -> TileConfig:
    """The tiling a registered implementation declares (e.g. "sgemm:10")."""
    from kernelab.spec import registry

    impl = registry.get(name)
    dtype = impl.dtypes[0] if impl.dtypes else "fp32"
    config = tile_config_from_metadata(impl.metadata, dtype=dtype)
    if config is None:
        raise KernelabError(
            f"implementation '{name}' declares no fixed tile (untiled, or chosen by "
            "autotuning); give --bm, --bn, --bk, --tm, --tn and --threads instead"
        )
    return config


def ladder_tiles(op: str = "gemm") -> dict[str, TileConfig]:
    """The tilings of every registered implementation of `op` that declares one: the SGEMM
    ladder steps, once kernelab.ladders.sgemm registers them."""
    from kernelab.spec import registry

    tiles = {}
    for impl in registry.implementations(op):
        dtype = impl.dtypes[0] if impl.dtypes else "fp32"
        config = tile_config_from_metadata(impl.metadata, dtype=dtype)
        if config is not None:
            tiles[impl.name] = config
    return tiles
