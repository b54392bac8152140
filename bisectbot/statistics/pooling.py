"""Very many outcomes pooled into few categories, fixed before any tested run is seen (pure).

The most probable outcomes stay categories of their own; the rest are pooled into a few tail
buckets of similar reference mass. Pooling only lowers total variation, so BAD on the pooled
categories is BAD; GOOD must leave room for what a bucket hides: TV ≤ TV_pooled + Σ_b min(q(b),
p(b)) ≤ TV_pooled + p(multi-outcome buckets), so GOOD is tested at tolerance − that mass (from
a control sample: an upper confidence bound on it). docs/how-it-decides.md says more.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from scipy.stats import beta as beta_dist

TAIL_BUCKETS = 4  # tail buckets of similar mass: more of them, more BAD power; the same hidden bound
_TAIL = "<tail {}>"


def bucket_name(i: int) -> str:
    """The category name of tail bucket i (1-based): reserved, like `<other>`."""
    return _TAIL.format(i)


def is_bucket(name: str) -> bool:
    return name.startswith("<tail ") and name.endswith(">") and name[6:-1].isdigit()


@dataclass(frozen=True)
class Pooling:
    """Which outcomes stay categories, which buckets the others went to, and the reference mass
    a GOOD claim must leave for redistribution inside buckets (`hidden`; `how`: how it was
    bounded, for reports)."""

    kept: tuple[str, ...]  # most probable first
    buckets: tuple[tuple[str, ...], ...]  # bucket i + 1's outcomes
    hidden: float
    how: str
    level: float = 0.0  # the chance `hidden` is too small (a confidence bound's), 0 when exact

    @property
    def pooled(self) -> int:
        return sum(len(b) for b in self.buckets)

    def describe(self, tolerance: float) -> str:
        """'4,056 of 4,096 outcomes pooled into 4 tail buckets: reference mass 0.0210 they can
        hide (exact); GOOD tested at tolerance 0.079': the reports' line."""
        total = len(self.kept) + self.pooled
        return (
            f"{self.pooled:,} of {total:,} outcomes pooled into {len(self.buckets)} tail buckets: "
            f"reference mass {self.hidden:.4f} they can hide ({self.how}); GOOD tested at tolerance "
            f"{tolerance - self.hidden:.3g}"
        )


def _split(ranked: Sequence[tuple[str, float]], buckets: int) -> tuple[tuple[str, ...], ...]:
    """Outcomes in rank order into at most `buckets` consecutive groups of similar mass."""
    total = sum(w for _, w in ranked) or 1.0
    groups: list[list[str]] = [[] for _ in range(buckets)]
    before = 0.0
    for name, w in ranked:
        groups[min(buckets - 1, int(buckets * (before + w / 2) / total))].append(name)
        before += w
    return tuple(tuple(g) for g in groups if g)


def _layout(
    ranked: Sequence[tuple[str, float]], max_categories: int
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
    """The kept outcomes and the buckets, for outcomes ranked most probable first (None: they
    fit in `max_categories` as they are)."""
    if len(ranked) <= max_categories:
        return None
    buckets = max(1, min(TAIL_BUCKETS, max_categories // 2))
    keep = max_categories - buckets
    return tuple(name for name, _ in ranked[:keep]), _split(ranked[keep:], buckets)


def pool_probs(probs: Mapping[str, float], max_categories: int | None) -> Pooling | None:
    """Pooling of an exact reference's outcomes (None: none needed). Hidden: the exact mass of
    the buckets of more than one outcome."""
    if max_categories is None:
        return None
    ranked = sorted(((k, float(v)) for k, v in probs.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))
    layout = _layout(ranked, max_categories)
    if layout is None:
        return None
    kept, buckets = layout
    mass = {k: v for k, v in ranked}
    total = sum(mass.values())
    hidden = sum(sum(mass[o] for o in b) for b in buckets if len(b) > 1) / total
    return Pooling(kept, buckets, hidden, "exact")


def pool_control(
    outcomes: Sequence[str | None], max_categories: int | None, level: float, own: Collection[str], unseen: str
) -> Pooling | None:
    """Pooling of a control sample's first runs (None: none needed). The first half ranks the
    outcomes (which stay categories); the second half, independent of that choice, bounds the
    reference mass of everything else (the buckets, and `unseen`: outcomes the sample never
    showed) by its Clopper–Pearson upper bound at 1 − `level`. `own` (a missed condition, a
    failed run) are categories of their own, never pooled; None (a run not counted) is left out."""
    if max_categories is None:
        return None
    apart = set(own) | {unseen}
    counts = Counter(o for o in outcomes if o is not None and o not in apart)
    if len(counts) <= max_categories:
        return None
    half = len(outcomes) // 2
    first = Counter(o for o in outcomes[:half] if o is not None and o not in apart)
    at = {o: i for i, o in reversed(list(enumerate(outcomes)))}  # where each first appears
    buckets = max(1, min(TAIL_BUCKETS, max_categories // 2))
    # the kept outcomes come from the first half alone (ties by first appearance there), so the
    # second half's share outside them is a fair sample of the mass they leave out
    kept = tuple(sorted(first, key=lambda o: (-first[o], at[o]))[: max_categories - buckets])
    rest = sorted((o for o in counts if o not in set(kept)), key=lambda o: (-counts[o], at[o]))
    pooled = _split([(o, float(counts[o])) for o in rest], buckets)
    second = [o for o in outcomes[half:] if o is not None]
    inside = set(kept) | set(own)
    outside = sum(o not in inside for o in second)
    n = len(second)
    hidden = 1.0 if outside >= n else float(beta_dist.ppf(1 - level, outside + 1, n - outside))
    how = (
        f"Clopper–Pearson upper bound at 1 − {level:.2g}: {outside} of the control's runs {half + 1}–"
        f"{len(outcomes)} outside the {len(kept)} outcomes its runs 1–{half} showed most"
    )
    return Pooling(kept, pooled, hidden, how, level)
