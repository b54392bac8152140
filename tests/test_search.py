"""The pure search: property tests over oracles with skips and inconclusive answers."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from bisectbot.core.outcome import Verdict
from bisectbot.core.search import bisect_search, next_probe


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, int, set[int]]:
    n = draw(st.integers(2, 300))
    culprit = draw(st.integers(1, n - 1))
    uninformative = draw(st.sets(st.integers(1, n - 2), max_size=n)) if n > 2 else set()
    return n, culprit, uninformative


@given(histories(), st.sampled_from([Verdict.SKIP, Verdict.INCONCLUSIVE, Verdict.UNLIKE]))
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
    assert next_probe(3, 4, set()) is None
    assert next_probe(3, 5, {4}) is None
