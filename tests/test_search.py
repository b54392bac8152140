"""The pure search: property tests over oracles with skips and inconclusive answers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisectbot.core.search import bisect_search, next_probe, presumed, skip_blocks
from bisectbot.statistics.outcome import Verdict


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, int, set[int]]:
    n = draw(st.integers(2, 300))
    culprit = draw(st.integers(1, n - 1))
    uninformative = draw(st.sets(st.integers(1, n - 2), max_size=n)) if n > 2 else set()
    return n, culprit, uninformative


@given(histories(), st.sampled_from([Verdict.SKIP, Verdict.INCONCLUSIVE, Verdict.NOT_APPLICABLE]))
@settings(max_examples=400)
def test_finds_boundary_or_honest_range(h: tuple[int, int, set[int]], blank: Verdict) -> None:
    n, culprit, uninformative = h
    calls: list[int] = []

    def oracle(pos: int) -> Verdict:
        calls.append(pos)
        if pos in uninformative:
            return blank
        return Verdict.BAD if pos >= culprit else Verdict.GOOD

    result = bisect_search(n, oracle)
    assert len(calls) == len(set(calls)), "a position was asked twice"
    assert 0 not in calls and n - 1 not in calls, "endpoints are the caller's job"
    assert culprit in result.candidates, "the true culprit is never excluded"
    # every candidate except the last is uninformative: the range is no wider than it must be
    assert all(p in uninformative for p in result.candidates if p != result.first_bad)
    if not uninformative:
        assert result.exact and result.first_bad == culprit
        assert len(calls) <= math.ceil(math.log2(n))


@given(st.integers(2, 2000), st.data())
def test_log2_probes_without_skips(n: int, data: st.DataObject) -> None:
    culprit = data.draw(st.integers(1, n - 1))
    result = bisect_search(n, lambda p: Verdict.BAD if p >= culprit else Verdict.GOOD)
    assert result.first_bad == culprit and result.exact
    assert len(result.asked) <= math.ceil(math.log2(n))


def test_skip_tries_a_neighbour() -> None:
    # 0 good, 10 bad, culprit 5; the midpoint 5 does not build
    answers = {5: Verdict.SKIP}
    result = bisect_search(11, lambda p: answers.get(p, Verdict.BAD if p >= 5 else Verdict.GOOD))
    assert result.asked[:2] == (5, 4)
    assert result.first_bad == 6 and result.last_good == 4
    assert list(result.candidates) == [5, 6]


def test_next_probe_none_when_adjacent() -> None:
    assert next_probe(3, 4, {}) is None
    assert next_probe(3, 5, {4: ""}) is None


# -- blocks of alike failures ----------------------------------------------------------------------
@st.composite
def blocked_histories(draw: st.DrawFn) -> tuple[int, int, range]:
    """A line with one block of commits that all fail alike, and a culprit outside it."""
    n = draw(st.integers(40, 3000))
    width = draw(st.integers(2, n // 3))
    start = draw(st.integers(1, n - 1 - width))
    block = range(start, start + width)
    culprit = draw(st.sampled_from([p for p in range(1, n) if p not in block]))
    return n, culprit, block


@given(blocked_histories())
@settings(max_examples=300)
def test_a_block_of_alike_failures_is_jumped_not_walked(h: tuple[int, int, range]) -> None:
    n, culprit, block = h
    calls: list[int] = []

    def oracle(pos: int):
        calls.append(pos)
        if pos in block:
            return Verdict.SKIP, "runs crash: killed by SIGSEGV, command variant #"
        return Verdict.BAD if pos >= culprit else Verdict.GOOD

    result = bisect_search(n, oracle)
    assert culprit in result.candidates
    skipped = [p for p in calls if p in block]
    # walking a block costs a probe per commit; jumping costs about two per halving
    assert len(skipped) <= 2 * math.ceil(math.log2(n)) + 2, (len(block), skipped)
    assert len(calls) <= 3 * math.ceil(math.log2(n)) + 4
    if culprit - 1 not in block:
        assert result.exact and result.first_bad == culprit
    else:  # the boundary sits at the block: the answer names it, never a guess inside it
        assert not result.exact and result.first_bad == culprit
        named = [b for b in result.blocks if b.signature and b.first <= culprit - 1 <= b.last]
        assert named and all(p in block for b in named for p in range(b.first, b.last + 1))


def test_an_isolated_skip_still_tries_the_neighbour_first() -> None:
    answers = {50: (Verdict.SKIP, "build failed: util.cpp:#:#: error: expected ';'")}
    result = bisect_search(101, lambda p: answers.get(p, Verdict.BAD if p >= 30 else Verdict.GOOD))
    assert result.asked[:2] == (50, 49) and result.exact and result.first_bad == 30


def test_presumed_and_blocks() -> None:
    skipped = {10: "a", 14: "a", 16: "b", 20: "a"}
    assert presumed(skipped) == {11: "a", 12: "a", 13: "a"}  # 16 "b" breaks 14..20
    assert presumed({10: "a", 14: "a"}, informative=[12]) == {}  # an answer between: not alike
    assert presumed({10: "", 14: ""}) == {}  # no signature, nothing to presume
    asked = [10, 14, 16, 12]
    answers = [Verdict.SKIP, Verdict.SKIP, Verdict.SKIP, Verdict.GOOD]
    blocks = skip_blocks(asked, answers, {10: "a", 14: "a", 16: "b"})
    assert [(b.first, b.last, b.signature, b.tested) for b in blocks] == [
        (10, 10, "a", (10,)),
        (14, 14, "a", (14,)),
        (16, 16, "b", (16,)),
    ]
    blocks = skip_blocks([10, 14], [Verdict.SKIP, Verdict.SKIP], {10: "a", 14: "a"})
    assert [(b.first, b.last, b.commits, b.tested) for b in blocks] == [(10, 14, 5, (10, 14))]


def test_known_answers_are_never_asked_again_and_bound_the_search() -> None:
    """A search that goes on after a failed confirmation: what was tested against the reference
    bounds the range from the start and is not asked again."""
    calls: list[int] = []

    def oracle(pos: int) -> Verdict:
        calls.append(pos)
        return Verdict.BAD if pos >= 30 else Verdict.GOOD

    known = {20: Verdict.GOOD, 45: Verdict.BAD, 70: Verdict.GOOD, 8: (Verdict.SKIP, "build failed")}
    result = bisect_search(101, oracle, known=known)
    assert result.exact and result.first_bad == 30
    assert not set(calls) & set(known) and all(20 < p < 45 for p in calls)


def test_placements_move_a_search_like_verdicts() -> None:
    """GOOD-SIDE and BAD-SIDE (placed without a test against the reference) steer as GOOD and BAD."""
    result = bisect_search(64, lambda p: Verdict.BAD_SIDE if p >= 17 else Verdict.GOOD_SIDE)
    assert result.exact and result.first_bad == 17
    assert Verdict.GOOD_SIDE.side is Verdict.GOOD and Verdict.BAD_SIDE.flipped() is Verdict.GOOD_SIDE
    assert not Verdict.GOOD_SIDE.tested and Verdict.GOOD.tested and not Verdict.CHANGED.informative


def test_built_positions_are_tried_first() -> None:
    calls: list[int] = []

    def oracle(pos: int) -> Verdict:
        calls.append(pos)
        return Verdict.BAD if pos >= 30 else Verdict.GOOD

    result = bisect_search(101, oracle, prefer={90, 12, 60})
    assert result.exact and result.first_bad == 30
    assert calls[:2] == [60, 12]  # the built ones nearest the middle, while any is in range
    assert 90 not in calls  # outside the range once 60 tested BAD


def test_the_scan_order_is_middle_first_and_reaches_every_inner_position() -> None:
    from bisectbot.core.search import scan_order

    assert scan_order(9) == [4, 2, 6, 1, 3, 5, 7]
    for n in (2, 3, 10, 257):
        order = scan_order(n)
        assert sorted(order) == list(range(1, n - 1))  # each inner position once
    # a stretch of a tenth of the line is met within about ten tests
    order = scan_order(256)
    for start in range(1, 230, 7):
        assert min(i for i, p in enumerate(order) if start <= p < start + 26) < 16


def test_a_scan_level_keeps_the_union_bound_over_every_commit() -> None:
    from bisectbot.statistics.stats import scan_level

    assert scan_level(100, 0.99) == pytest.approx(0.01 / 104)
    assert scan_level(100, 0.99) * 104 <= 0.01 + 1e-15
