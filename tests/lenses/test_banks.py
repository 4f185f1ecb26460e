"""Bank conflicts on hand-worked warp accesses."""

from __future__ import annotations

import pytest

from kernelab.errors import KernelabError
from kernelab.lenses.banks import bank_conflicts, pattern_addresses, warp_wavefronts


def test_column_walk_with_stride_32_is_32_way():
    # Every row starts in bank 0: 32 distinct words in one bank.
    report = bank_conflicts(32, 4, "column")
    assert report.wavefronts == 32
    assert report.conflict_degree == 32
    assert not report.conflict_free
    assert report.padding_words == 1


def test_column_walk_with_stride_33_is_conflict_free():
    report = bank_conflicts(33, 4, "column")
    assert report.wavefronts == 1
    assert report.conflict_free
    assert report.padding_words == 0


def test_stride_of_two_words_is_two_way():
    # Lanes t and t + 16 land in the same bank.
    assert bank_conflicts(2, 4, "column").wavefronts == 2


def test_float4_row_access_is_conflict_free():
    report = bank_conflicts(128, 16, "row")
    assert report.wavefronts == 4  # four quarter-warps, 128 bytes each
    assert report.ideal_wavefronts == 4
    assert report.conflict_free


def test_float4_column_access_needs_aligned_padding():
    # Stride 128 words: the 8 lanes of a quarter-warp all hit banks 0-3: 8-way.
    report = bank_conflicts(128, 16, "column")
    assert report.conflict_degree == 8
    assert report.wavefronts == 32
    # Rows 4 words apart: lane t covers banks 4t..4t+3, all 32 banks once per quarter-warp.
    assert report.padding_words == 4
    assert bank_conflicts(132, 16, "column").conflict_free


def test_broadcast_is_conflict_free():
    report = bank_conflicts(32, 4, "broadcast")
    assert report.wavefronts == 1
    assert report.conflict_free


def test_8_byte_accesses_are_split_into_half_warps():
    report = bank_conflicts(64, 8, "row")
    assert report.ideal_wavefronts == 2
    assert report.wavefronts == 2


def test_general_addresses_two_lanes_same_bank_different_words():
    addresses = [4 * t for t in range(32)]
    addresses[1] = 4 * 32  # lane 1 now reads word 32: bank 0, like lane 0's word 0
    assert warp_wavefronts(addresses) == [2]


def test_inactive_lanes_are_ignored():
    addresses = [None] * 32
    addresses[0] = 0
    assert warp_wavefronts(addresses) == [1]
    assert warp_wavefronts([None] * 32) == [0]


def test_pattern_addresses_column():
    assert pattern_addresses("column", 33)[:3] == [0, 132, 264]


@pytest.mark.parametrize(
    "call",
    [
        lambda: bank_conflicts(32, 12, "column"),
        lambda: bank_conflicts(0, 4, "column"),
        lambda: bank_conflicts(32, 4, "diagonal"),
        lambda: warp_wavefronts([0] * 31),
        lambda: warp_wavefronts([2] * 32, 4),
    ],
)
def test_bad_input_is_a_kernelab_error(call):
    with pytest.raises(KernelabError):
        call()
