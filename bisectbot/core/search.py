"""Search (pure): binary search for the first bad commit over an oracle, knowing nothing of git.

Positions 0..n-1 are the commits of the first-parent line, oldest first; position 0 is known
good and n-1 known bad (the caller confirmed both). The oracle answers a `Verdict` (GOOD, BAD,
GOOD-SIDE and BAD-SIDE: placed by a quick step, SKIP: cannot be built or run, INCONCLUSIVE: the
test ran out of budget), optionally with a *signature* saying how a skip failed. Only an
answer with a side (`Verdict.side`) moves the search; when only undecidable commits separate
the last good from the first bad, it reports the whole range rather than guess.

Skips often come in blocks: a flag that crashes for months, a build broken for a week. An
isolated skip tries the nearest neighbour of the midpoint (the next commit usually repairs a
broken build). Once a failure signature repeats, the commits between two alike failures are
presumed to fail the same way, and the next probe jumps to the middle of the longest stretch
still untried, as `git bisect skip` spreads its picks, instead of walking one commit at a time.

Commits the user skipped (`--skip`, `--exclude`) are known skips before the search starts
(`skip=`): never handed to the oracle, never presumed to spread to their neighbours (their
signature is empty), and a boundary next to one stays a range, as with any other skip.

The other search, `sticky_bisect` (last), is Bayesian: it stays on a commit until its side is
clear, its evidence the statistics of statistics.stats.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Mapping, Sequence, Union

import numpy as np
from scipy.special import gammaln

from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Verdict

Answer = Union[Verdict, tuple[Verdict, str]]  # a verdict, or a verdict and how a skip failed


@dataclass(frozen=True)
class SkipBlock:
    """Consecutive positions that failed, or are presumed to fail, the same way."""

    first: int
    last: int
    signature: str
    tested: tuple[int, ...]  # the positions actually tried; the others are presumed

    @property
    def commits(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class SearchResult:
    """`first_bad` when the boundary is exact; otherwise the candidates between last good and first bad."""

    last_good: int
    first_bad: int
    asked: tuple[int, ...] = field(default=())  # positions the oracle was asked, in order
    answers: tuple[Verdict, ...] = field(default=())
    blocks: tuple[SkipBlock, ...] = field(default=())

    @property
    def exact(self) -> bool:
        return self.first_bad == self.last_good + 1

    @property
    def candidates(self) -> range:
        """Positions that may be the first bad one (just `first_bad` when exact)."""
        return range(self.last_good + 1, self.first_bad + 1)


def presumed(skipped: Mapping[int, str], informative: Sequence[int] = ()) -> dict[int, str]:
    """Untried positions between two skips of the same (non-empty) signature, with no other
    failure and no informative answer between them: presumed to fail that way too."""
    out: dict[int, str] = {}
    marks = sorted([(p, s) for p, s in skipped.items()] + [(p, "\0informative") for p in informative])
    for (a, sig_a), (b, sig_b) in zip(marks, marks[1:]):
        if sig_a == sig_b and sig_a and sig_a != "\0informative":
            out.update({p: sig_a for p in range(a + 1, b)})
    return out


def next_probe(lo: int, hi: int, skipped: Mapping[int, str], prefer: Collection[int] = ()) -> int | None:
    """The position to test between lo (good) and hi (bad), or None when none is left.

    `skipped` maps positions that proved uninformative to their failure signature ("" when
    none). The midpoint, or after an isolated skip its nearest untried neighbour; once a
    signature repeats, the middle of the longest stretch not tried nor presumed. Positions in
    `prefer` (commits already built: a test there costs runs, not a build) come first: the one
    nearest the midpoint, while any is left between lo and hi."""
    if hi - lo < 2:
        return None
    inside = {p: s for p, s in skipped.items() if lo < p < hi}
    guessed = presumed(inside)
    untried = [p for p in range(lo + 1, hi) if p not in inside and p not in guessed]
    if not untried:
        return None
    mid = (lo + hi) // 2
    if preferred := [p for p in untried if p in prefer]:
        return min(preferred, key=lambda p: (abs(p - mid), p))
    repeats = Counter(s for s in inside.values() if s)
    if not any(n > 1 for n in repeats.values()):
        return min(untried, key=lambda p: (abs(p - mid), p))
    stretches: list[list[int]] = []
    for p in untried:
        if stretches and stretches[-1][-1] == p - 1:
            stretches[-1].append(p)
        else:
            stretches.append([p])
    best = max(stretches, key=lambda r: (len(r), -abs((r[0] + r[-1]) // 2 - mid)))
    return (best[0] + best[-1]) // 2


def skip_blocks(
    asked: Sequence[int], answers: Sequence[Verdict], signatures: Mapping[int, str]
) -> tuple[SkipBlock, ...]:
    """The blocks of alike failures among the answers so far (tried and presumed positions)."""
    skipped = {p: signatures.get(p, "") for p, a in zip(asked, answers) if not a.informative}
    informative = [p for p, a in zip(asked, answers) if a.informative]
    marks = {**presumed(skipped, informative), **skipped}
    blocks: list[SkipBlock] = []
    for p in sorted(marks):
        sig = marks[p]
        last = blocks[-1] if blocks else None
        if last is not None and last.last == p - 1 and last.signature == sig and sig:
            tested = last.tested + ((p,) if p in skipped else ())
            blocks[-1] = SkipBlock(last.first, p, sig, tested)
        else:
            blocks.append(SkipBlock(p, p, sig, (p,) if p in skipped else ()))
    return tuple(blocks)


def bisect_search(
    n: int,
    oracle: Callable[[int], Answer],
    skip: Iterable[int] = (),
    known: Mapping[int, Answer] | None = None,
    prefer: Collection[int] = (),
) -> SearchResult:
    """Binary search over positions 0..n-1 (0 good, n-1 bad); at most one oracle call per
    position, none for the positions in `skip` (known to be untestable: the user skipped them)
    nor in `known` (answered before: a search that goes on after a failed confirmation)."""
    return kary_search(n, 1, lambda positions: [oracle(positions[0])], skip, known, prefer)[0]


def round_probes(lo: int, hi: int, k: int, skipped: Mapping[int, str], prefer: Collection[int] = ()) -> list[int]:
    """Up to k positions strictly between lo and hi that split it into k + 1 near-equal parts,
    avoiding positions known or presumed to be undecidable (each moved to its nearest untried
    neighbour); with k = 1, `next_probe`'s choice. Empty when nothing is left to try."""
    if k == 1:
        pos = next_probe(lo, hi, skipped, prefer)
        return [] if pos is None else [pos]
    inside = {p: s for p, s in skipped.items() if lo < p < hi}
    guessed = presumed(inside)
    untried = [p for p in range(lo + 1, hi) if p not in inside and p not in guessed]
    if not untried:
        return []
    if len(untried) <= k:
        return untried
    picks: list[int] = []
    for j in range(1, k + 1):
        target = lo + (hi - lo) * j / (k + 1)
        best = min((p for p in untried if p not in picks), key=lambda p: (p not in prefer, abs(p - target), p))
        picks.append(best)
    return sorted(picks)


def _answer(reply: Answer) -> tuple[Verdict, str]:
    return (Verdict(reply[0]), reply[1]) if isinstance(reply, tuple) else (Verdict(reply), "")


def kary_search(
    n: int,
    k: int,
    oracle: Callable[[list[int]], Sequence[Answer]],
    skip: Iterable[int] = (),
    known: Mapping[int, Answer] | None = None,
    prefer: Collection[int] = (),
) -> tuple[SearchResult, int]:
    """Binary search generalised to k probes per round (k machines building and testing at
    once): ⌈log_(k+1) n⌉ rounds instead of ⌈log2 n⌉ when every answer is decisive. The oracle
    gets a round's positions and answers them all. Returns the result and the rounds taken.

    An answer's side moves the bounds (GOOD and GOOD-SIDE the good one, BAD and BAD-SIDE the
    bad one). Answers that contradict each other (a BAD below a GOOD) keep the lowest BAD as
    the bound: the boundary is searched below it, and the confirmation decides
    (bisecting.bisect). Positions in `skip` are never asked: they count as skipped from the
    start (signature "", so nothing is presumed from them); the ends cannot be skipped.
    `known` answers some positions before the search starts (they are never asked again);
    `prefer` lists positions to try first (already built)."""
    if n < 2:
        raise ValueError("need at least a good and a bad position")
    lo, hi = 0, n - 1
    skipped: dict[int, str] = {p: "" for p in skip if 0 < p < n - 1}
    asked: list[int] = []
    answers: list[Verdict] = []
    rounds = 0
    before = {p: _answer(r) for p, r in (known or {}).items() if 0 < p < n - 1}

    def place(verdicts: Mapping[int, Verdict]) -> None:
        nonlocal lo, hi
        bad = [p for p, a in verdicts.items() if a.side is Verdict.BAD and p <= hi]
        if bad:
            hi = min(bad)
        good = [p for p, a in verdicts.items() if a.side is Verdict.GOOD and p < hi]
        if good:
            lo = max(lo, max(good))

    for pos, (answer, signature) in before.items():
        if not answer.informative:
            skipped[pos] = signature
    place({p: a for p, (a, _) in before.items()})
    # a known GOOD is at or below lo and a known BAD at or above hi from here on: never asked
    while positions := round_probes(lo, hi, max(1, k), skipped, prefer):
        rounds += 1
        replies = oracle(positions)
        verdicts: dict[int, Verdict] = {}
        for pos, reply in zip(positions, replies):
            answer, signature = _answer(reply)
            asked.append(pos)
            answers.append(answer)
            verdicts[pos] = answer
            if not answer.informative:
                skipped[pos] = signature
        place(verdicts)
    return SearchResult(lo, hi, tuple(asked), tuple(answers), skip_blocks(asked, answers, skipped)), rounds


# ---------------------------------------------------------------------------------------------
# Probabilistic ("sticky") bisection
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StickyResult:
    culprit: int  # most probable first bad position
    posterior: float  # its posterior probability
    runs: int  # runs used at positions 1..n−2 (the bad endpoint's runs are the caller's)
    tested: tuple[int, ...]  # distinct positions run, in first-visit order (each costs a build)
    visits: int  # number of (re)visits, i.e. moves between positions
    credible: tuple[int, int] = (0, 0)  # the shortest range of positions holding `confidence` of the posterior
    stuck: int | None = None  # a position whose side one visit of `visit_runs` runs could not settle


def _log_dm(counts: np.ndarray, a: np.ndarray) -> np.ndarray:
    """log of the Dirichlet(a)-multinomial probability of a sequence with these counts."""
    return (gammaln(counts + a) - gammaln(a)).sum(-1) - (gammaln(counts.sum(-1) + a.sum()) - gammaln(a.sum()))


def _credible_range(per_position: np.ndarray, mass: float) -> tuple[int, int]:
    """Shortest [i, j] (positions 1..n−1) with Σ posterior ≥ mass (the whole range if none)."""
    best = (1, per_position.size)
    total, i = 0.0, 0
    for j in range(per_position.size):
        total += per_position[j]
        while i < j and total - per_position[i] >= mass:
            total -= per_position[i]
            i += 1
        if total >= mass and j - i < best[1] - best[0]:
            best = (i + 1, j + 1)
    return best


def sticky_bisect(
    n: int,
    run: Callable[[int], int],
    p: Sequence[float],
    bad_counts: Sequence[int],
    *,
    confidence: float = 0.999,
    band: tuple[float, float] = (0.02, 0.98),
    max_runs: int = 1_000_000,
    good_strength: float | None = None,
    visit_runs: int | None = None,
) -> StickyResult:
    """Bayesian ("probabilistic") bisection over positions 0..n−1, 0 good and n−1 bad, that
    also learns the bad distribution. `run(i)` returns the category index of one fresh run at i;
    `bad_counts` are the bad endpoint's counts (its runs are evidence like any other).

    Model: the first bad position c is uniform on 1..n−1; runs at i < c come from p (known),
    runs at i ≥ c from an unknown q ~ Dirichlet(½) shared by every bad position. With
    `good_strength` A the good side is learned too, from Dirichlet(A·p) (centred on p): a good
    model that only *nearly* fits (a glitch-tolerant reference) would otherwise pay a little per
    run at every good position, enough over thousands of runs for "everything is bad, with a
    pooled q" to win; learned, that price grows only with the log of the runs. Given the
    visited positions v_1 < … < v_m = n−1 with counts N_i, every c in (v_{j−1}, v_j] has the
    same likelihood  L_p(Σ_{i<j} N_i) · KT(Σ_{i≥j} N_i)  (KT: the Dirichlet-½ marginal), so the
    exact posterior lives on m intervals. Because q is integrated out, a noisy estimate of the
    bad distribution cannot make the bisection overconfident (a plug-in q̂ does: see the bench),
    and every run at a bad position sharpens what "bad" looks like.

    Policy (Horstein 1963; Waeber, Frazier, Henderson, SICON 2013): move to the position whose
    P(c ≤ i) is nearest ½, and *stick* there while P(c ≤ i) stays inside `band`, since moving
    costs a build (Henderson et al., "Flake-Aware Culprit Finding", ICST 2023). A wrong local
    call is not final: later runs pull the posterior back. Stop when culprit and parent are both
    visited and P(c = culprit) ≥ confidence. A position that one visit of `visit_runs` runs
    cannot put on either side fits neither model (a distribution between good and bad, e.g. a
    milder form of the bug): the search stops there and says so (`stuck`), rather than feeding
    it runs for ever.
    """
    if n < 2:
        raise ValueError("need at least a good and a bad position")
    search = _StickySearch(n, p, bad_counts, good_strength)
    while True:
        logpost, sizes, suffix, prefix = search.intervals()
        post = np.exp(logpost - stats.logsumexp_last(logpost))
        j = int(post.argmax())
        exact = sizes[j] == 1
        if (exact and post[j] >= confidence) or search.runs >= max_runs or n == 2:
            return search.result(post, sizes, confidence)
        cdf = np.cumsum(np.repeat(post / sizes, sizes))[: n - 2]  # P(c ≤ i), i = 1..n−2
        i = int(np.abs(cdf - 0.5).argmin()) + 1
        if i not in search.pos:
            search.add(i)
            logpost, sizes, suffix, prefix = search.intervals()
        if search.stay(i, run, logpost, suffix, prefix, band, max_runs, visit_runs):
            now = np.exp(logpost - stats.logsumexp_last(logpost))
            return search.result(now, sizes, confidence, stuck=i)


class _StickySearch:
    """The state of one `sticky_bisect`: the visited positions, each one's counts, the runs and
    visits so far, and the posterior over the intervals between visited positions."""

    def __init__(self, n: int, p: Sequence[float], bad_counts: Sequence[int], good_strength: float | None):
        with np.errstate(divide="ignore"):
            self.logp = np.log(np.asarray(p, dtype=float))
        self.k = self.logp.size
        bad = np.asarray(bad_counts, dtype=float)
        if bad.shape != (self.k,):
            raise ValueError(f"bad_counts must have {self.k} entries")
        self.pos: list[int] = [n - 1]  # visited positions, sorted
        self.own: list[np.ndarray] = [bad.copy()]  # counts per visited position
        self.runs, self.visits = 0, 0
        self.tested: list[int] = []
        self.a_good = None if good_strength is None else good_strength * np.asarray(p, dtype=float)
        if self.a_good is not None and (self.a_good <= 0).any():
            raise ValueError("with good_strength every category needs p > 0 (use a tolerant reference)")

    def intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(log posterior, sizes, suffix and prefix counts) of the intervals (v_{j−1}, v_j]."""
        counts = np.array(self.own)
        suffix = np.cumsum(counts[::-1], axis=0)[::-1]  # Σ_{i ≥ j} N_i
        prefix = np.vstack([np.zeros(self.k), np.cumsum(counts, axis=0)[:-1]])  # Σ_{i < j} N_i
        with np.errstate(invalid="ignore"):
            ll_good = np.where(prefix > 0, prefix * self.logp, 0.0).sum(-1)
        if self.a_good is not None:
            ll_good = _log_dm(prefix, self.a_good)
        ll_bad = gammaln(suffix + 0.5).sum(-1) - gammaln(suffix.sum(-1) + self.k / 2)
        sizes = np.diff(np.array([0] + self.pos))
        return ll_good + ll_bad + np.log(sizes), sizes, suffix, prefix

    def add(self, i: int) -> None:
        """Position i visited for the first time (it costs a build)."""
        t = int(np.searchsorted(self.pos, i))
        self.pos.insert(t, i)
        self.own.insert(t, np.zeros(self.k))
        self.tested.append(i)

    def stay(
        self,
        i: int,
        run: Callable[[int], int],
        logpost: np.ndarray,
        suffix: np.ndarray,
        prefix: np.ndarray,
        band: tuple[float, float],
        max_runs: int,
        visit_runs: int | None,
    ) -> bool:
        """One visit of position i: runs there, each folded into the posterior (`logpost`,
        `suffix` and `prefix` updated in place), while P(c ≤ i) stays inside `band` and the
        budget lasts. True when `visit_runs` runs could not move it out of the band (stuck)."""
        t = self.pos.index(i)
        self.visits += 1
        left = slice(0, t + 1)  # intervals with c ≤ i: i is bad there
        this_visit = 0
        while self.runs < max_runs:
            if visit_runs is not None and this_visit >= visit_runs:
                return True
            x = run(i)
            self.runs += 1
            this_visit += 1
            s_left = suffix[left]
            logpost[left] += np.log((s_left[:, x] + 0.5) / (s_left.sum(-1) + self.k / 2))
            suffix[left, x] += 1
            if self.a_good is None:
                logpost[t + 1 :] += self.logp[x]
            else:  # i is good for the intervals right of it: their learned good model predicts
                right = prefix[t + 1 :]
                logpost[t + 1 :] += np.log((right[:, x] + self.a_good[x]) / (right.sum(-1) + self.a_good.sum()))
                right[:, x] += 1
            self.own[t][x] += 1
            p_bad = math.exp(float(stats.logsumexp_last(logpost[left]) - stats.logsumexp_last(logpost)))
            if not (band[0] < p_bad < band[1]):
                break
        return False

    def result(self, post: np.ndarray, sizes: np.ndarray, confidence: float, stuck: int | None = None) -> StickyResult:
        """The answer from the posterior `post` of the intervals (normalised) and their sizes."""
        j = int(post.argmax())
        return StickyResult(
            int(self.pos[j]),
            float(post[j] / sizes[j]),
            self.runs,
            tuple(self.tested),
            self.visits,
            _credible_range(np.repeat(post / sizes, sizes), confidence),  # positions 1..n−1
            stuck=stuck,
        )


def scan_order(n: int) -> list[int]:
    """The inner positions 1 … n − 2 of a line of n, the middle first, then the middles of the
    halves, and so on (breadth first): the order `bisect --scan` tests them in. A departure that
    came and went between two GOOD commits is met early when it spans many commits (after about
    n / its length tests), and every inner position is reached."""
    out: list[int] = []
    queue = [(0, n - 1)]
    while queue:
        lo, hi = queue.pop(0)
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        out.append(mid)
        queue += [(lo, mid), (mid, hi)]
    return out


def untested_stretches(working_side: Collection[int], culprit: int) -> list[tuple[int, int]]:
    """Where an earlier departure could hide before a named commit at `culprit`: the pairs
    (a, b), a < b ≤ culprit − 1, of consecutive positions shown on the working side (and the
    working end 0 and the culprit's parent always) with commits between them that nothing
    tested. Every commit outside them is on the working side, so a departure before the
    culprit lies inside one of them, entering and leaving between its two ends."""
    marks = sorted({0, culprit - 1, *(p for p in working_side if 0 <= p < culprit)})
    return [(a, b) for a, b in zip(marks, marks[1:]) if b - a > 1]
