"""The one vocabulary of outcomes, from the statistics to the report (pure).

GOOD and BAD are claims about the reference, each made by a test against it at a stated error
level: GOOD = within `tolerance` of the reference, BAD = departs from it by more than `eta`.
Nothing else is ever called GOOD or BAD. A search may place a commit on a side without such a
test (GOOD-SIDE: shown unlike the broken end; BAD-SIDE: the sticky search's posterior): that
orders the search and decides nothing. CHANGED says a commit's runs differ from its parent's
(the two-sample test of the confirmation). INCONCLUSIVE: a test ran out of budget; SKIP: the
commit cannot be built or run; NOT-APPLICABLE: a cross-check arm that does not exist there.
`Find` says which way a bisect looks, so the inversions `--find fixed` needs live here and
nowhere else.
"""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"  # cannot be built or run (like `git bisect skip`)
    INCONCLUSIVE = "inconclusive"  # the test ran out of budget
    NOT_APPLICABLE = "not-applicable"  # a cross-check arm that does not exist at this commit
    GOOD_SIDE = "good-side"  # placed on the good side by the search, not tested against the reference
    BAD_SIDE = "bad-side"  # placed on the bad side by the search, not tested against the reference
    CHANGED = "changed"  # its runs differ from its parent's (two-sample test, fresh seeds)

    @property
    def side(self) -> "Verdict | None":
        """Which side of the boundary a search reads: GOOD for GOOD and GOOD-SIDE, BAD for BAD
        and BAD-SIDE, None for the verdicts that place nothing."""
        return {
            Verdict.GOOD: Verdict.GOOD,
            Verdict.GOOD_SIDE: Verdict.GOOD,
            Verdict.BAD: Verdict.BAD,
            Verdict.BAD_SIDE: Verdict.BAD,
        }.get(self)

    @property
    def informative(self) -> bool:
        """Verdicts that move a search (a side); the others are "no information here"."""
        return self.side is not None

    @property
    def tested(self) -> bool:
        """GOOD and BAD: a claim about the reference, made by a test against it."""
        return self in (Verdict.GOOD, Verdict.BAD)

    def flipped(self) -> "Verdict":
        """GOOD ↔ BAD and GOOD-SIDE ↔ BAD-SIDE; the others stay."""
        return {
            Verdict.GOOD: Verdict.BAD,
            Verdict.BAD: Verdict.GOOD,
            Verdict.GOOD_SIDE: Verdict.BAD_SIDE,
            Verdict.BAD_SIDE: Verdict.GOOD_SIDE,
        }.get(self, self)

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> "Verdict | None":
        # "unlike" (like neither end) came from the two-point search steps of versions before
        # c5ed8dd (2026-12-02), so verdicts and reports stored by them may hold it. It placed
        # no side and exited as INCONCLUSIVE does (git bisect run: 125), and is read as that.
        return cls.INCONCLUSIVE if value == "unlike" else None


class Find(str, Enum):
    """What a bisect looks for between its old (`good`) and new (`bad`) ref.

    BAD: the first commit that broke the property (the new end is broken).
    FIXED: the first commit that restored it (the old end is broken, the new one works).
    The search itself always looks for "the first broken-side commit" on a line ordered from
    the working end to the broken end; `search_verdict` translates.
    """

    BAD = "bad"
    FIXED = "fixed"

    @property
    def what(self) -> str:
        """'first bad' / 'first fixed', as reports say it."""
        return f"first {self.value}"

    @property
    def culprit_verdict(self) -> Verdict:
        """What the named commit tests as (BAD for a breaking commit, GOOD for a fix)."""
        return Verdict.BAD if self is Find.BAD else Verdict.GOOD

    @property
    def parent_verdict(self) -> Verdict:
        return self.culprit_verdict.flipped()

    @property
    def broken_ref_name(self) -> str:
        """Which of the user's refs (--good / --bad) names the broken endpoint."""
        return "bad" if self is Find.BAD else "good"

    @property
    def working_ref_name(self) -> str:
        return "good" if self is Find.BAD else "bad"

    def role_label(self, role: str) -> str:
        """A verdict's role as people read it. With FIXED the broken end is the one given as
        --good: 'good-endpoint BAD' reads as a contradiction, so the ends are named by the
        option the user typed and their place ('--good (old end)'); BAD there means "still
        shows the defect". With BAD the role names already match what was typed."""
        if self is Find.BAD:
            return role
        for name, where in (("good", "old end"), ("bad", "new end")):
            if role == f"{name}-endpoint":
                return f"--{name} ({where})"
            if role == f"{name}-model":
                return f"--{name} ({where}) model"
        return role

    @property
    def verdict_words(self) -> str:
        """What BAD and GOOD mean in this search's report."""
        if self is Find.BAD:
            return "BAD = departs from the reference (shows the defect), GOOD = like the reference"
        return (
            "BAD = departs from the reference (still shows the defect), GOOD = like the reference "
            "(fixed); the --good (old) end is the broken one"
        )

    def search_verdict(self, verdict: Verdict) -> Verdict:
        """A commit's verdict as the search reads it ("broken side" = BAD)."""
        return verdict if self is Find.BAD else verdict.flipped()

    def __str__(self) -> str:
        return self.value
