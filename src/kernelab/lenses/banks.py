"""Shared-memory bank conflicts of one warp's access.

Shared memory is 32 banks, each 4 bytes wide; 4-byte word w lives in bank w % 32. One
wavefront serves at most one word per bank, so a warp's request takes as many wavefronts as
the busiest bank has distinct words to deliver (threads reading the same word share it: a
broadcast). Wider accesses are split first, as the hardware does: a warp's 8-byte accesses
are served per half-warp (16 threads x 8 bytes = 128 bytes) and 16-byte accesses per
quarter-warp (8 x 16 bytes), each part taking at least one wavefront. So the ideal, conflict-
free request takes 1, 2 or 4 wavefronts for 4-, 8- and 16-byte accesses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from kernelab.errors import KernelabError

BANKS = 32
BANK_WIDTH = 4  # bytes
WARP = 32
ACCESS_WIDTHS = (4, 8, 16)
PATTERNS = ("column", "row", "broadcast")


def _check_width(access_width_bytes: int) -> None:
    if access_width_bytes not in ACCESS_WIDTHS:
        raise KernelabError(
            f"access width must be one of {', '.join(map(str, ACCESS_WIDTHS))} bytes, "
            f"got {access_width_bytes}"
        )


def phases(access_width_bytes: int) -> int:
    """How many parts the hardware splits a warp's request into: 128 bytes per part."""
    _check_width(access_width_bytes)
    return access_width_bytes * WARP // (BANKS * BANK_WIDTH)


def warp_wavefronts(addresses: Sequence[int | None], access_width_bytes: int = 4) -> list[int]:
    """Wavefronts each part of one warp's request takes; `addresses` holds one byte address
    per lane (None for an inactive lane), each aligned to the access width."""
    _check_width(access_width_bytes)
    if len(addresses) != WARP:
        raise KernelabError(f"a warp has {WARP} lanes; got {len(addresses)} addresses")
    for address in addresses:
        if address is not None and (address < 0 or address % access_width_bytes):
            raise KernelabError(
                f"address {address} is not a non-negative multiple of {access_width_bytes}"
            )
    lanes_per_part = WARP // phases(access_width_bytes)
    words_per_access = access_width_bytes // BANK_WIDTH
    result = []
    for start in range(0, WARP, lanes_per_part):
        words_by_bank: dict[int, set[int]] = defaultdict(set)
        for address in addresses[start : start + lanes_per_part]:
            if address is None:
                continue
            first_word = address // BANK_WIDTH
            for word in range(first_word, first_word + words_per_access):
                words_by_bank[word % BANKS].add(word)
        result.append(max((len(words) for words in words_by_bank.values()), default=0))
    return result


def pattern_addresses(
    pattern: str, row_stride_words: int, access_width_bytes: int = 4, column: int = 0
) -> list[int]:
    """Byte addresses of the common warp patterns on a row-major 2D array whose rows are
    `row_stride_words` 4-byte words apart:
      column     lane t reads row t at the same column (a transposed / column walk)
      row        lane t reads the t-th consecutive element of one row
      broadcast  every lane reads the same element
    """
    _check_width(access_width_bytes)
    if row_stride_words <= 0:
        raise KernelabError(
            f"row stride must be a positive number of words, got {row_stride_words}"
        )
    if pattern == "column":
        return [
            t * row_stride_words * BANK_WIDTH + column * access_width_bytes for t in range(WARP)
        ]
    if pattern == "row":
        return [t * access_width_bytes for t in range(WARP)]
    if pattern == "broadcast":
        return [column * access_width_bytes] * WARP
    raise KernelabError(f"unknown access pattern '{pattern}' (known: {', '.join(PATTERNS)})")


@dataclass(frozen=True)
class BankReport:
    pattern: str
    row_stride_words: int
    access_width_bytes: int
    wavefronts: int  # for the whole warp
    ideal_wavefronts: int  # 1, 2 or 4: one per 128-byte part
    conflict_degree: int  # the worst part's busiest bank: 1 means conflict-free
    padding_words: int | None  # smallest row padding (4-byte words) that removes the conflict
    explanation: str

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts == self.ideal_wavefronts

    @property
    def slowdown(self) -> float:
        return self.wavefronts / self.ideal_wavefronts

    def to_dict(self) -> dict:
        return {
            "pattern": self.pattern,
            "row_stride_words": self.row_stride_words,
            "access_width_bytes": self.access_width_bytes,
            "wavefronts": self.wavefronts,
            "ideal_wavefronts": self.ideal_wavefronts,
            "conflict_degree": self.conflict_degree,
            "conflict_free": self.conflict_free,
            "slowdown": self.slowdown,
            "padding_words": self.padding_words,
            "explanation": self.explanation,
        }


def _wavefronts_for(pattern: str, stride: int, width: int) -> list[int]:
    return warp_wavefronts(pattern_addresses(pattern, stride, width), width)


def bank_conflicts(
    row_stride_words: int, access_width_bytes: int = 4, pattern: str = "column"
) -> BankReport:
    """The conflict of one warp's `pattern` access to a 2D shared-memory array, and the
    smallest padding of each row (in 4-byte words, keeping the access aligned) that cures it."""
    per_part = _wavefronts_for(pattern, row_stride_words, access_width_bytes)
    wavefronts = sum(per_part)
    ideal = phases(access_width_bytes)
    degree = max(per_part)
    padding: int | None = 0
    if wavefronts > ideal:
        # Padding by a multiple of the access width keeps every access aligned.
        step = access_width_bytes // BANK_WIDTH
        padding = next(
            (
                pad
                for pad in range(step, BANKS + step, step)
                if sum(_wavefronts_for(pattern, row_stride_words + pad, access_width_bytes))
                == ideal
            ),
            None,
        )
    if wavefronts == ideal:
        explanation = (
            f"conflict-free: {wavefronts} wavefront{'s' if wavefronts > 1 else ''}, "
            f"the minimum for {access_width_bytes}-byte accesses"
        )
    else:
        cure = (
            f"pad each row by {padding} word{'s' if padding != 1 else ''} "
            f"(stride {row_stride_words + padding}) to make it conflict-free"
            if padding
            else "no padding up to 32 words cures it: change the layout (swizzle)"
        )
        explanation = (
            f"{degree}-way bank conflict: {wavefronts} wavefronts instead of {ideal} "
            f"({wavefronts / ideal:.0f}x slower); {cure}"
        )
    return BankReport(
        pattern=pattern,
        row_stride_words=row_stride_words,
        access_width_bytes=access_width_bytes,
        wavefronts=wavefronts,
        ideal_wavefronts=ideal,
        conflict_degree=degree,
        padding_words=padding,
        explanation=explanation,
    )
