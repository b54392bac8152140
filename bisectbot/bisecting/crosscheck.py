"""Stage 5 of a bisect: the cross-check arms, after the answer.

An arm (e.g. speculative decoding inside llama-server) gets verdicts of its own; it never steers
the search, so it runs only once the search and its confirmation are over: the answer is printed
first, and the arm's builds (llama-server is the heaviest target of llama.cpp) never delay it.

Where: at the commit named and its parent when one was found, else at the two ends. At the
culprit and its parent an arm answers what a reader of the result asks next (did the same change
move the other path too, i.e. shared code, or only the main one?), and it is cheapest there:
the two are neighbours the search has just built, so their libraries are in the compiler cache,
where the ends are the furthest-apart trees of the range. An arm that does not exist yet at the
culprit (llama-server's speculative decoding arrived months after #29975's culprit) says nothing
about it, so that arm is also asked at the broken end, the commit the user wants fixed: a GOOD
there beside the main BAD puts the defect in the main path. An arm out of the bisect's budget
stops there; the answer stands (arms are not among the claims its confidence rests on).
"""

from __future__ import annotations

from bisectbot.bisecting.bisection import Bisection
from bisectbot.bisecting.budget import BudgetSpent
from bisectbot.core.plan import Departure
from bisectbot.events import Answered, ArmStarted
from bisectbot.records.commits import Ask
from bisectbot.records.reports import BisectStatus
from bisectbot.statistics.outcome import Verdict


def arm_commits(b: Bisection, departure: Departure) -> list[tuple[str, str]]:
    """(role, sha) where the arms run first: the culprit and its parent when found, else the ends."""
    plan = b.plan
    if departure.status is BisectStatus.FOUND:
        culprit = departure.found.result.first_bad
        return [("culprit", plan.line[culprit]), ("parent", b.ledger.parent_of(culprit))]
    broken, working = plan.find.broken_ref_name, plan.find.working_ref_name
    return [(f"{broken}-endpoint", plan.line[plan.broken_pos]), (f"{working}-endpoint", plan.line[plan.working_pos])]


def cross_check(b: Bisection, departure: Departure) -> None:
    """Announce the answer, then test every arm where `arm_commits` says, and at the broken end
    for an arm not applicable at the culprit (stopping, answer kept, when the budget runs out)."""
    if departure.status is BisectStatus.STOPPED:
        return
    plan, test = b.plan, b.tester.cfg.test
    arms = list(b.tester.cfg.arms)
    at = arm_commits(b, departure) if arms else []
    b.events.emit(Answered(departure.status.value, departure.message, tuple(arms), tuple(r for r, _ in at)))
    broken_end = (f"{plan.find.broken_ref_name}-endpoint", plan.line[plan.broken_pos])
    try:
        for arm in arms:
            for role, sha in at:
                b.events.emit(ArmStarted(arm, sha))
                v = b.test_sha(sha, Ask(role=role, alpha=test.alpha, beta=test.beta, arm=arm))
                if role == "culprit" and v.verdict is Verdict.NOT_APPLICABLE and sha != broken_end[1]:
                    b.events.emit(ArmStarted(arm, broken_end[1]))
                    b.test_sha(broken_end[1], Ask(role=broken_end[0], alpha=test.alpha, beta=test.beta, arm=arm))
    except BudgetSpent:
        return
