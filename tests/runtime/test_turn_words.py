"""The split-row softmax's exchange words kept between calls (runtime/turn_words.py):
what is kept and when, and the turn arithmetic that makes kept words safe."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from kernelab.runtime import turn_words  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture
def reuse(monkeypatch):
    monkeypatch.setattr(turn_words, "REUSE", True)
    turn_words.forget()
    yield
    turn_words.forget()


@pytest.mark.parametrize("setting,expected", [(None, True), ("1", True), ("0", False)])
def test_words_are_kept_unless_the_environment_says_0(setting, expected):
    # on by default (measured faster on the H200); "0" restores a fill per call
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KERNELAB_SOFTMAX_REUSE_WORDS"}
    if setting is not None:
        env["KERNELAB_SOFTMAX_REUSE_WORDS"] = setting
    code = "from kernelab.runtime import turn_words; print(turn_words.REUSE)"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(expected)


def test_without_reuse_every_call_gets_fresh_zeroed_words(monkeypatch):
    monkeypatch.setattr(turn_words, "REUSE", False)
    turn_words.forget()  # earlier tests may have kept words (kept by default)
    assert not turn_words.continues(CPU)
    words, bases, continued = turn_words.exchange_words(CPU, "k", (3, 4, 5, 1), 3)
    assert not continued and words.shape == (3, 4, 5, 1) and bases.shape == (3,)
    assert words.dtype == bases.dtype == torch.int64
    assert not words.any() and not bases.any()
    words.fill_(7)
    again, _, _ = turn_words.exchange_words(CPU, "k", (3, 4, 5, 1), 3)
    assert not again.any()  # a new allocation, zeroed
    assert turn_words._kept == {}


def test_with_reuse_the_same_words_come_back_for_the_same_key(reuse):
    assert turn_words.continues(CPU)
    words, bases, continued = turn_words.exchange_words(CPU, "k", (2, 4, 8, 1), 2)
    assert continued and not words.any() and not bases.any()
    words.fill_(5)
    bases.fill_(3)
    again, again_bases, _ = turn_words.exchange_words(CPU, "k", (2, 4, 8, 1), 2)
    assert (again == 5).all() and (again_bases == 3).all()  # kept, not zeroed again
    # another kernel or another shape: words of its own
    other, _, _ = turn_words.exchange_words(CPU, "other", (2, 4, 8, 1), 2)
    shaped, _, _ = turn_words.exchange_words(CPU, "k", (2, 4, 16, 1), 2)
    assert not other.any() and not shaped.any()
    assert len(turn_words._kept) == 3


def test_the_oldest_kept_words_go_first(reuse, monkeypatch):
    monkeypatch.setattr(turn_words, "MOST_KEPT", 2)
    first, _, _ = turn_words.exchange_words(CPU, "a", (4,), 1)
    first.fill_(1)
    turn_words.exchange_words(CPU, "b", (4,), 1)
    turn_words.exchange_words(CPU, "c", (4,), 1)  # "a" is dropped
    assert len(turn_words._kept) == 2
    again, _, _ = turn_words.exchange_words(CPU, "a", (4,), 1)
    assert not again.any()


def _slot(turn: int) -> int:
    return (turn - 1) % 4  # the deferred kernels publish turn t in slot (t - 1) % 4


def _tag(turn: int) -> int:
    return ((turn + 3) // 4) % 2  # softmax._turn_bit


def test_continued_turns_never_read_a_stale_word_as_current():
    # The argument in turn_words' docstring, played out: one group of 3 programs over many
    # calls of random length (1-11 rows), each call starting from the stored base mod 8, the
    # peers' steps interleaved at random as far as the deferred kernel allows. Whenever a
    # program reads a slot for turn t, the word there must be t's or t - 4's (never older),
    # and its one-bit tag must match exactly when it is t's.
    rng = random.Random(13)
    peers = 3
    # what each slot of each peer holds: (turn written, tag); zeroed words read as turns
    # -3..0 with tag 0
    slots = [[(t - 3, 0) for t in range(4)] for _ in range(peers)]
    base = 0
    reads = 0
    for _ in range(300):
        rows = rng.randint(1, 11)
        published = [0] * peers  # turns published in this call, per peer
        finished = [0] * peers  # rows finished (turn base + finished read) per peer
        while min(finished) < rows:
            peer = rng.randrange(peers)
            if published[peer] < rows and published[peer] < finished[peer] + 2:
                # publish this peer's next turn: step i publishes turn i + 1 and then finishes
                # turn i, so a peer is at most two turns past its own last finish
                turn = base + published[peer] + 1
                slots[peer][_slot(turn)] = (turn, _tag(turn))
                published[peer] += 1
            elif finished[peer] < published[peer]:
                # finish the next row: read every peer's word of its turn
                turn = base + finished[peer] + 1
                for other in range(peers):
                    written, tag = slots[other][_slot(turn)]
                    assert written in (turn, turn - 4), (written, turn)
                    assert (tag == _tag(turn)) == (written == turn)
                    reads += 1
                if all(slots[o][_slot(turn)][0] == turn for o in range(peers)):
                    finished[peer] += 1
        # the stored base is mod 8; the words keep the absolute turns they were written at,
        # so renumber them the way the next call sees them (same slot, same tag)
        shift = (base + rows) - (base + rows) % turn_words.TURN_PERIOD
        slots = [[(t - shift, tag) for t, tag in peer] for peer in slots]
        base = (base + rows) % turn_words.TURN_PERIOD
    assert reads > 1000
