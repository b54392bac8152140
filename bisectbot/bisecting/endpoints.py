"""Stage 1 of a bisect: the ends as given must test as given before any search starts.

The broken end must test BAD against the reference and the working one GOOD; an end that does
not is one line (EndpointError) saying what it showed and what to change: the other --find when
both test the opposite, a crash rate that rose, a build's log command. When the broken end tests
GOOD and prints what the working end prints seed for seed, nothing changed: a clean range. The
working end's first seeds are run twice (is the program deterministic per seed?), and a working
end unlike the commits next to it is named when the search ends beside it. Kept apart from the
search (bisecting.bisect): everything here refuses early, with a message a user can act on.
"""

from __future__ import annotations

import math

from bisectbot.bisecting.bisection import Bisection
from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.core.diagnose import distance_name, either_way, number_distance, observed_number, observed_pairs
from bisectbot.core.ends import find_unusual, nothing_changed, unusual_end
from bisectbot.core.plan import Departure
from bisectbot.core.search import SearchResult
from bisectbot.errors import EndpointError
from bisectbot.events import EndpointStarted, Reran
from bisectbot.records.commits import UNREADABLE, Ask, CommitVerdict
from bisectbot.report.hints import crash_rate_cause, likely_causes, undecided_hint, undecided_number_hint
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Find, Verdict
from bisectbot.statistics.skips import failure_shift
from bisectbot.statistics.two_sample import seed_for_seed

RERUN_SEEDS = 64  # the working end's first seeds run a second time: enough to see a noisy program


def rerun_working_end(b: Bisection) -> None:
    """Run the working end's first RERUN_SEEDS seeds a second time (CommitTester.reruns: stored
    apart, replayed on a resume) and keep what they show in `b.reran`: a seed that printed
    otherwise means the program is not deterministic per seed, and then no commit is placed by
    seed identity (Bisection.deterministic). Once per bisect; not on a cluster."""
    if b.reran is not None or b.width > 1 or b.tester.cfg.statistic.kind == "time":
        return  # done, on a cluster, or a timing (never the same twice: Bisection.deterministic)
    plan = b.plan
    sha = plan.line[plan.working_pos]
    b.within_budget()
    b.reran, b.reran_executed = b.tester.reruns(sha, RERUN_SEEDS)
    if not b.deterministic:
        b.events.emit(Reran(plan.find.working_ref_name, sha, b.reran.shared, b.reran.differ))


def end_ask(b: Bisection, name: str) -> Ask:
    """The endpoint test of the end the user named `name`. When the reference is the working
    end's own runs (a control sample, whose first runs are made already), that end's first seeds
    are run twice before its test (rerun_working_end; otherwise after it, check_endpoints), and
    when the program is not deterministic per seed its test reads the reruns: against its own
    first runs it would pass on no evidence, and the search's budgets, which follow the runs it
    took, would be far too short for commits whose runs are independent of the control's."""
    plan = b.plan
    if name != plan.find.working_ref_name or not b.control_at_working_end:
        return plan.ask(f"{name}-endpoint")
    rerun_working_end(b)
    return plan.ask(f"{name}-endpoint", rerun=not b.deterministic)


def unusual_working_end(b: Bisection, result: SearchResult) -> None:
    """When the reference is the working end's own runs (`reference: good`) and the search ended
    next to that end: is the end itself unlike the commits next to it (core.ends.find_unusual,
    on the runs of the commits this bisect ran on that side)? Then EndpointError, naming another
    end to try, before a confirmation that could only wander: a commit in the band is undecided
    against the end's runs, so every commit like it is placed on the broken side."""
    plan, ledger = b.plan, b.ledger
    if not (b.control_at_working_end and b.deterministic) or plan.working_pos not in (
        result.last_good,
        result.first_bad,
    ):
        return
    after = plan.find is Find.BAD
    pos = result.first_bad if after else result.last_good
    where = ledger.positions()
    side = {
        v.sha
        for v in ledger.verdicts
        if v.arm == "main"
        and v.block == 0
        and v.sha in where
        and (where[v.sha] >= pos if after else where[v.sha] <= pos)
    }
    working = plan.line[plan.working_pos]
    seen = {sha: dict(b.tester.observations(sha)) for sha in [working, *sorted(side, key=where.__getitem__)]}
    ref = b.tester.reference
    name = plan.find.working_ref_name
    found = find_unusual((name, working), plan.line[pos], ledger.verdicts, seen, (ref.names, ref.probs), after)
    if found is not None:
        cfg = b.tester.cfg
        raise EndpointError(unusual_end(found, cfg.test.indifference, cfg.test.tolerance))


def log_command(b: Bisection, v: CommitVerdict) -> str:
    """For an endpoint whose build failed: the command that prints the whole build log."""
    if v.verdict is not Verdict.SKIP or v.build in ("ok", "") or not v.build_log:
        return ""
    return str(b.tester.runner.builder.log_command(v.sha))


def diagnosis(b: Bisection, v: CommitVerdict) -> list[str]:
    """What an end that tested the wrong way showed: its observed distribution against the
    reference, the config mistakes its runs point at (or a crash rate that rose from the working
    end), or for an undecided test what to raise."""
    reference, cfg = b.tester.reference, b.tester.cfg
    out = []
    numeric = b.tester.numbers.reference() if b.tester.numbers is not None else None
    if numeric is not None and v.values:
        out.append(f"observed/reference {observed_number(v.values, numeric)}")
    elif pairs := observed_pairs(v.counts, reference.names, reference.probs):
        out.append(f"observed/reference {pairs}")
    crashes = _crash_rate(b, v)
    # failed runs a rising crash rate explains are not said again as the program failing there
    failures = v.failures if crashes is None else {k: n for k, n in v.failures.items() if k in UNREADABLE}
    causes = likely_causes(
        v.counts, failures, v.others, reference, last_unreadable=v.last_unreadable, last_failed=v.last_failed
    )
    causes = ([crashes] if crashes else []) + causes
    if v.sha in b.plan.line and v.sha != b.plan.line[b.plan.working_pos]:
        _working_end_for(b)
        # did the share of runs meeting the condition change between the working end and this one?
        if (shift := b.condition_shift_text(b.plan.line.index(v.sha))) is not None:
            causes.append(shift)
    out += [f"likely cause: {cause}" for cause in causes]
    if not causes and v.verdict is Verdict.GOOD:  # the broken end: a change it holds is within the tolerance
        what = "total variation" if numeric is None else distance_name(numeric)
        out.append(either_way(cfg.test.indifference, cfg.test.tolerance, what))
    if not causes and v.verdict is Verdict.INCONCLUSIVE and numeric is not None and v.values:
        distance = number_distance(v.values["estimate"], numeric) if "estimate" in v.values else math.nan
        out.append(
            undecided_number_hint(
                {**v.values, "distance": distance},
                tolerance=cfg.test.tolerance,
                eta=cfg.test.indifference,
                cap=SEED_BLOCK,
                timed=cfg.statistic.kind == "time",
            )
        )
    elif not causes and v.verdict is Verdict.INCONCLUSIVE and v.counts:
        out.append(
            undecided_hint(
                v.counts,
                reference,
                alpha=v.alpha,
                beta=v.beta,
                tolerance=cfg.test.tolerance,
                eta=cfg.test.indifference,
                max_runs=cfg.run.max_runs,
                cap=SEED_BLOCK,
                # paired with a control: z's variance is at most twice the exact test's (pairs
                # that share nothing), less where the seeds tie the runs (the hint plans for the most)
                slower=2.0 if b.tester.control is not None else 1.0,
            )
        )
    return out


def _crash_rate(b: Bisection, v: CommitVerdict) -> str | None:
    """When the broken end's runs fail (and failed runs are no observation): do they fail more
    often than the working end's, on the seeds both ran (skips.failure_shift, at the bisect's
    level)? The cause, naming `statistic.failures: outcome`, or None. The working end is tested
    first if it is not yet (a test the bisect makes anyway)."""
    plan = b.plan
    failed = {k: n for k, n in v.failures.items() if k not in UNREADABLE}
    if b.tester.reference.failed is not None or not failed or v.sha != plan.line[plan.broken_pos]:
        return None
    working = _working_end_for(b, needed=True)
    if working is None:
        return None
    shift = failure_shift(b.tester.failed_runs(working.sha), b.tester.failed_runs(v.sha), plan.level)
    if shift is None:
        return None
    return crash_rate_cause(shift, plan.find.broken_ref_name, plan.find.working_ref_name, failed, v.last_failed)


def _working_end_for(b: Bisection, needed: bool = False) -> CommitVerdict | None:
    """Before an end that tested the wrong way is explained: test the working end first when the
    explanation may need it and it is not tested yet (serially the broken end comes first). With
    a condition but no `condition_prob` in the reference, a change in how often the condition is
    met shows only against the working end's runs on the same seeds (Bisection.condition_shift_text);
    so does a crash rate that rose (`needed`). That end's test is one the bisect makes anyway."""
    plan, ref = b.plan, b.tester.reference
    name = plan.find.working_ref_name
    if (seen := b.ledger.end_verdict(name)) is not None:
        return seen
    if not needed and (b.tester.cfg.statistic.condition is None or stats.MISSED in ref.names):
        return None
    b.events.emit(EndpointStarted(name, plan.ref(name), plan.line[plan.working_pos]))
    return b.test(plan.working_pos, end_ask(b, name))


class NothingChanged(Exception):
    """The broken end tests GOOD and prints what the working end prints, seed for seed: the
    bisect ends with `departure` (status clean: core.ends.nothing_changed), not an error."""

    def __init__(self, departure: Departure):
        super().__init__(departure.message)
        self.departure = departure


def _nothing_changed(b: Bisection, name: str, v: CommitVerdict) -> None:
    """When the broken end `v` tests GOOD: test the working end if it is not yet, and when it is
    GOOD too and the two printed the same outcome on the seeds both ran (two_sample.seed_for_seed,
    shown alike), raise NothingChanged. Otherwise return (the endpoint error says what is wrong)."""
    plan = b.plan
    if name != plan.find.broken_ref_name or v.verdict is not Verdict.GOOD:
        return
    working = _working_end_for(b, needed=True)
    if working is None or working.verdict is not Verdict.GOOD:
        return
    same = seed_for_seed(_printed(b, v.sha), _printed(b, working.sha))
    if same.alike():
        raise NothingChanged(
            nothing_changed(
                (name, v.sha), (plan.find.working_ref_name, working.sha), same, plan.broken_pos, plan.find is Find.BAD
            )
        )


def _printed(b: Bisection, sha: str) -> dict[int, int]:
    """What the commit printed on the common seeds: its observations (CommitTester.observations),
    and −2 for each run that failed, so that a crash rate that changed is a difference too."""
    failed = {seed: -2 for seed, yes in b.tester.failed_runs(sha).items() if yes}
    return {**dict(b.tester.observations(sha)), **failed}


def check_endpoints(b: Bisection) -> None:
    """Stage 1: the broken end must test BAD and the working end GOOD against the reference
    (EndpointError otherwise, saying which --find when they are the other way round). The
    cross-check arms run after the answer (bisecting.crosscheck)."""
    plan = b.plan
    broken, working = plan.find.broken_ref_name, plan.find.working_ref_name
    ends: tuple[tuple[str, int, Verdict], ...] = (
        (broken, plan.broken_pos, Verdict.BAD),
        (working, plan.working_pos, Verdict.GOOD),
    )
    if plan.scan or (plan.broken_last and b.width == 1):
        # tested when the answer rests on it (test_broken_end), or last of a scan, which lets it test GOOD
        ends = ends[1:]
    if b.width > 1:  # both at once
        for name, pos, _ in ends:
            b.events.emit(EndpointStarted(name, plan.ref(name), plan.line[pos]))
        got = b.test_many([(plan.line[pos], end_ask(b, name)) for name, pos, _ in ends])
        for (name, _, want), v in zip(ends, got):
            if v.verdict is not want:
                _refuse_swapped(b, name, v, want)
                _nothing_changed(b, name, v)
                raise EndpointError(endpoint_message(name, plan.ref(name), v, want, log_command(b, v), diagnosis(b, v)))
    for name, pos, want in ends if b.width == 1 else ():
        b.events.emit(EndpointStarted(name, plan.ref(name), plan.line[pos]))
        v = b.test(pos, end_ask(b, name))
        if v.verdict is not want:
            _refuse_swapped(b, name, v, want)
            _nothing_changed(b, name, v)
            raise EndpointError(endpoint_message(name, plan.ref(name), v, want, log_command(b, v), diagnosis(b, v)))
    rerun_working_end(b)  # its first runs are its test's: only the second runs are made here


def test_broken_end(b: Bisection, why: str) -> CommitVerdict:
    """The broken end's endpoint test, for a plan that tests it last (`plan.broken_last`): now
    that the answer rests on it (`why`). EndpointError when it does not test BAD, saying that
    it was tested last and why."""
    plan = b.plan
    name = plan.find.broken_ref_name
    if (seen := b.ledger.end_verdict(name)) is not None:
        return seen
    b.events.emit(EndpointStarted(name, plan.ref(name), plan.line[plan.broken_pos]))
    v = b.test(plan.broken_pos, end_ask(b, name))
    if v.verdict is not Verdict.BAD:
        _nothing_changed(b, name, v)
        message = endpoint_message(name, plan.ref(name), v, Verdict.BAD, log_command(b, v), diagnosis(b, v))
        raise EndpointError(
            f"{message} (tested last, {why}: with builds this slow the {name} end is built only when "
            "the answer rests on it)"
        )
    return v


def _refuse_swapped(b: Bisection, name: str, v: CommitVerdict, want: Verdict) -> None:
    """An end that tests the opposite of what it should: when the other end does too, the
    ends are the other way round for this --find (a fix, not a breakage, or the reverse):
    EndpointError that says which --find to rerun with. Otherwise return (the caller's
    error says what is wrong)."""
    plan = b.plan
    if v.verdict is not want.flipped():
        return
    other = plan.find.working_ref_name if name == plan.find.broken_ref_name else plan.find.broken_ref_name
    pos = plan.working_pos if other == plan.find.working_ref_name else plan.broken_pos
    other_want = Verdict.GOOD if other == plan.find.working_ref_name else Verdict.BAD
    seen = next((x for x in b.ledger.verdicts if x.arm == "main" and x.role == f"{other}-endpoint"), None)
    if seen is None:  # the other end is not tested yet (serially, the broken end comes first)
        b.events.emit(EndpointStarted(other, plan.ref(other), plan.line[pos]))
        seen = b.test(pos, end_ask(b, other))
    if seen.verdict is not other_want.flipped():
        return
    good_v, bad_v = (v, seen) if name == "good" else (seen, v)
    if plan.find is Find.BAD:
        hint = (
            "the bug went away between them: to find the commit that fixed it, rerun with --find fixed "
            "(or swap --good and --bad if they were mixed up)"
        )
    else:
        hint = "the bug came in between them: to find the commit that broke it, rerun without --find fixed (--find bad)"
    raise EndpointError(
        f"the ends are the other way round for --find {plan.find.value}: --good {plan.good_ref} "
        f"({plan.good[:12]}) tests {good_v.verdict.value.upper()} and --bad {plan.bad_ref} ({plan.bad[:12]}) "
        f"tests {bad_v.verdict.value.upper()} (BAD = departs from the reference, GOOD = like it); {hint}"
    )


def endpoint_message(
    name: str, ref: str, v: CommitVerdict, want: Verdict, log_command: str = "", diagnosis: list[str] | None = None
) -> str:
    """One line: what the end did, why, the data it showed and what to change."""
    what = {Verdict.SKIP: "cannot be tested", Verdict.INCONCLUSIVE: "is inconclusive"}.get(
        v.verdict, f"tests {v.verdict.value.upper()}"
    )
    log = f"; the whole build log: {log_command}" if log_command else ""
    shown = "".join(f"; {line}" for line in diagnosis or [])
    hint = ""
    misspelt = any("misspelt there?" in line for line in diagnosis or [])  # then eta is not the point
    if want is Verdict.GOOD and v.verdict is Verdict.BAD and not misspelt:
        hint = (
            "; if the reference describes this end only roughly (say a stray outcome in a few % of runs), "
            "it sits between eta and tolerance, where it may be called either way: bisectbot does not guess "
            "there — raise test.eta, or make this commit the reference (reference.control) to find the "
            "first change from it"
        )
    return (
        f"{name} ref {ref} ({v.sha[:12]}) {what}, expected {want.value.upper()}: "
        f"{v.reason}{'' if f'after {v.runs} runs' in v.reason else f' (after {v.runs} runs)'}{log}{shown}{hint}"
    )
