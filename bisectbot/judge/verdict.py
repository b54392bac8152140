"""Verdict stage: one commit → build → runs → sequential test → good / bad / skip / ….

`CommitTester.verdict` makes sure the commit is built (once, ever), feeds its runs in seed order to
the sequential test and stops as soon as the test decides. Everything it does is stored, so
asking again for the same verdict replays the database instead of running anything.

Seed blocks: a commit's main test uses seeds [first_seed, first_seed + max_runs); the final
re-test of the culprit and its parent uses the next block, so it sees fresh seeds and is
independent of the verdicts that led the search there.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from bisectbot.config import Config
from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.core import broken_end, confirming
from bisectbot.errors import BisectbotError
from bisectbot.events import Events, RunsProgress, VerdictReached
from bisectbot.judge.numeric import Numbers, NumberTest, reading
from bisectbot.judge.parse import observe
from bisectbot.judge.reference import ControlPairing, GrowingControl
from bisectbot.judge.runner import CommitRunner, Prepared
from bisectbot.judge.sweep import RunStream
from bisectbot.judge.timing import TimedPairs, TimedStream
from bisectbot.processes.procs import ServerError
from bisectbot.records.commits import Ask, BuildRecord, CommitVerdict, RunRecord, Tally, masked
from bisectbot.records.reports import ReferenceSummary
from bisectbot.statistics import sequential, stats, two_sample
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.two_sample import SeedForSeed, seed_for_seed


def judge(
    counts: Sequence[int],
    ask: Ask,
    reference: stats.Reference,
    *,
    tolerance: float,
    budget: int,
    eta: float = 0.0,
    alike: Mapping[str, tuple[int, int]] | None = None,
    paired: stats.Evidence | None = None,
) -> stats.Evidence:
    """The sequential test the question asks for, on the counts so far (pure).

    reference: the generic test against the reference (or, with `paired`, the two-sample test
    of the runs against the control's, `control_sample.PairedTest`, already run): GOOD = within
    tolerance, BAD = departs by more than eta; with `ask.q_bad` half its BAD mixture bets on the
    broken end's q̂ (faster, still valid);
    quick: a search step when builds are cheap: BAD as above, or GOOD-SIDE once the commit is
    shown unlike the broken end's q̂ (never GOOD: it orders the search, broken_end.test_quick);
    depart: the BAD side alone (is the working end itself beyond eta? never GOOD);
    bad-model: no test, keep measuring the (already BAD) endpoint until q̂ is good enough
    relative to the size of the bug (broken_end.bad_endpoint_enough).
    `alike` (every commit's tests run on the common seeds): per commit of `ask.alike`,
    how many shared seeds gave the same observation and how many did not; once the commit is
    shown like an end (two_sample.log_e_alike) it is placed beside it, GOOD-SIDE or BAD-SIDE, unless
    the test against the reference decided first."""
    if ask.mode == "bad-model":
        enough = broken_end.bad_endpoint_enough(counts, reference, eta=eta)
        return stats.Evidence(
            Verdict.BAD if enough else None,
            sum(counts),
            0.0,
            0.0,
            f"bad-endpoint model from {sum(counts)} counted runs",
        )
    control = paired is not None or reference.control is not None
    if ask.mode == "quick" and not control:
        assert ask.q_bad is not None
        quick = broken_end.test_quick(
            counts, reference, ask.q_bad, alpha=ask.alpha, beta=ask.beta, max_runs=budget, eta=eta
        )
        return _placed_alike(quick, ask, alike) if alike else quick
    if control:
        ev = paired or stats.Evidence(None, int(sum(counts)), 0.0, 0.0, "no run paired with the control yet")
    else:
        ev = sequential.test_against_reference(
            counts,
            reference,
            alpha=ask.alpha,
            beta=ask.beta,
            tolerance=tolerance,
            max_runs=budget,
            eta=eta,
            toward=ask.q_bad,
        )
    if ask.mode == "quick":
        assert ask.q_bad is not None
        ev = broken_end.test_quick(
            counts, reference.as_point(), ask.q_bad, alpha=ask.alpha, beta=ask.beta, max_runs=budget, eta=eta, bad=ev
        )
    if ask.mode == "depart":
        total = int(sum(counts))
        if ev.decision is Verdict.BAD:
            return ev
        decision = Verdict.INCONCLUSIVE if total >= budget else None
        return stats.Evidence(
            decision,
            total,
            ev.log_e_bad,
            0.0,
            f"not shown beyond eta after {total} runs: E_bad = {ev.log_e_bad:.3g} (log)",
        )
    return _placed_alike(ev, ask, alike, "outcome" if ev.interval is None else "number") if alike else ev


def _placed_alike(
    ev: stats.Evidence, ask: Ask, alike: Mapping[str, tuple[int, int]], what: str = "outcome"
) -> stats.Evidence:
    """A step's evidence, or — when its test has not decided (GOOD, BAD, or for a quick step
    GOOD-SIDE) — a placement beside an end the commit is shown to be like, seed for seed."""
    if ev.decision in (Verdict.GOOD, Verdict.BAD, Verdict.GOOD_SIDE):
        return ev
    for side, sha, _ in ask.alike:
        agree, differ = alike.get(sha, (0, 0))
        if two_sample.log_e_alike(agree, differ) >= math.log(1 / two_sample.STEER_LEVEL):
            return stats.Evidence(
                Verdict(f"{side}-side"),
                ev.n,
                ev.log_e_bad,
                ev.log_e_good,
                f"like {sha[:12]} (on the {side.upper()} side): the same {what} on {agree} of "
                f"{agree + differ} seeds both ran (TV < {two_sample.ALIKE_DELTA:g} between them); not a "
                f"test against the reference",
            )
    return ev


class Untestable(confirming.Untestable):
    """A commit the sticky search or a confirmation cannot use (cannot be built or run, runs
    mostly fail); `signature` says how, for blocks of commits that fail alike."""

    def __init__(self, reason: str, signature: str):
        super().__init__(reason)
        self.signature = signature


@dataclass
class TimeSpent:
    """Seconds this tester spent running the program (only where runs were executed, not
    replayed): for the report's breakdown of its wall time."""

    running: float = 0.0


class CommitTester:
    """Judges commits of one config against one reference; every build and run is remembered.

    Each verdict it reaches is also emitted (`VerdictReached`), so a job can store it as it
    happens."""

    # Where its verdicts are reached: "here", or "cluster" (ClusterTester), which runs no
    # sticky search (its feed runs here, not on the workers).
    where = "here"

    def __init__(
        self,
        cfg: Config,
        runner: CommitRunner,
        reference: stats.Reference,
        events: Events,
        control: GrowingControl | None = None,
        numbers: Numbers | None = None,
    ):
        self.cfg, self.runner, self.reference, self.events = cfg, runner, reference, events
        self.spent = TimeSpent()
        self.control = control  # a control-sample reference that grows while tests need it to
        self.numbers = numbers  # a numeric statistic (kind mean or time): how runs are read and judged
        self._observed: dict[str, tuple[object, tuple[tuple[int, int], ...]]] = {}  # observations()

    def control_runs(self, verdicts: Sequence[CommitVerdict]) -> int | None:
        """Runs of the control that no verdict counts (the report's `control_runs`), or None
        without a control."""
        if self.control is not None:
            return self.control.extra_runs(verdicts)
        if self.numbers is not None and self.numbers.paired:
            return self.numbers.extra_runs(verdicts)
        return None

    def grown_reference(self, summary: ReferenceSummary) -> ReferenceSummary:
        """The reference's summary as the control ended (it grows while tests need it)."""
        if self.control is not None:
            return self.control.grown(summary)
        if self.numbers is not None:
            return self.numbers.grown(summary)
        return summary

    def build_many(self, shas: Sequence[str]) -> list[BuildRecord]:
        """Build commits, one after the other (a cluster's tester builds them at once)."""
        return [self.runner.builder.ensure(sha, self.cfg.build) for sha in shas]

    def subject(self, sha: str) -> str:
        return self.runner.workspace.info(sha).subject

    def program(self, sha: str) -> str:
        """What identifies the program the commit runs (built first if it is not yet; see
        runner.program_identity): commits with the same identity run byte-identical, self-contained
        binaries with the same command and input files, so a seed gives the same output. "" when
        it cannot run, when bytes do not settle it, or on a cluster (whose keys name the commit)."""
        if self.where != "here":
            return ""
        prepared = self.runner.prepare(sha)
        return prepared.program if prepared.executor is not None else ""

    def category(self, rec: RunRecord) -> int | None:
        """Which category of the reference one run falls in (None: not counted: a failed run,
        unless failed runs are an outcome, or a missed condition without a MISSED category)."""
        return self.classify(rec)[0]

    def classify(self, rec: RunRecord) -> tuple[int | None, str | None]:
        """The run's category and its outcome text (None: no outcome token). A failed run is
        FAILED when that is a category (`statistic.failures: outcome`), else not counted. A
        number (a numeric statistic, read by `read`) is the one category VALUE."""
        if not rec.ok:
            return self.reference.failed, None
        obs = observe(rec.tokens or (), self.cfg.statistic)
        if self.numbers is not None:  # a number is counted; `nan` printed there is no observation
            return (0 if reading(rec, self.cfg) is not None else None), obs.outcome
        return self.reference.index(obs.outcome, obs.met_condition), obs.outcome

    def read(self, rec: RunRecord) -> tuple[RunRecord, float | None]:
        """A run and its number (a numeric statistic): one that ran but gave no readable number
        is `unparsable`, saying why, like any output the parse cannot read."""
        if self.numbers is None or not rec.ok:
            return rec, None
        value = reading(rec, self.cfg)
        if isinstance(value, str):
            return replace(rec, status="unparsable", tokens=None, detail=value), None
        return rec, value  # None: `nan` printed, no observation (classify does not count it)

    def signature(self, rec: RunRecord, category: int | None) -> int:
        """What two commits' runs on one seed are compared by, seed for seed: the category, or
        for a number the number itself (as a 31-bit hash); −1 for a run not counted."""
        if category is None:
            return -1
        if self.numbers is None:
            return category
        text = repr(reading(rec, self.cfg)).encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:4], "big") >> 1

    def verdict(self, sha: str, ask: Ask) -> CommitVerdict:
        """The commit's answer to `ask` (on a cross-check arm when `ask.arm` names one).

        When the command variant's runs mostly fail, the next variant that fits the binary is
        tried before the commit is skipped (each variant's runs are stored under its own key)."""
        self.events.check()
        runner = self.runner
        arm = None if ask.arm == "main" else ask.arm
        prepared = runner.prepare(sha) if arm is None else runner.prepare_arm(sha, arm)
        while True:
            if ask.rerun and prepared.executor is not None:
                prepared = runner.rerunning(prepared)
            if prepared.executor is None:
                if not prepared.applicable:
                    return self._reached(prepared, ask, None, Verdict.NOT_APPLICABLE, prepared.why)
                return self._reached(
                    prepared, ask, None, Verdict.SKIP, prepared.why, signature=_skip_signature(prepared)
                )
            measured = self._measure(prepared, ask)
            if measured.failed is not None:
                reason = measured.tally.failure_reason(prepared.variant)
                if (retry := runner.variant_failed(prepared, reason, arm)) is not None:
                    prepared = retry
                    continue
                return self._reached(
                    prepared,
                    ask,
                    measured.tally,
                    Verdict.SKIP,
                    reason,
                    executed=measured.executed,
                    signature=measured.failed,
                )
            return measured.verdict(self, prepared, ask)

    def _measure(self, prepared: Prepared, ask: Ask) -> "_Measured":
        """Feed the commit's runs to the test until it decides, the budget ends, or the runs
        mostly fail (then `failed` says how)."""
        budget = self.cfg.test.model_runs if ask.mode == "bad-model" else ask.budget or self.cfg.run.max_runs
        seeds = self.runner.seed_block(prepared.sha, ask.block, ask.start + budget)[ask.start :]
        out = _Measured(Tally(self.reference.names), len(seeds))
        ends = {sha: dict(table) for _, sha, table in ask.alike}
        alike = {sha: [0, 0] for sha in ends}
        pairing = self._test_for(ask, seeds)
        gate = self._gate(ask, out.budget, pairing is not None)

        def judged() -> stats.Evidence:
            return judge(
                out.tally.counts,
                ask,
                self.reference,
                tolerance=self.cfg.test.tolerance,
                budget=out.budget,
                eta=self.cfg.test.indifference,
                alike={k: (a, d) for k, (a, d) in alike.items()},
                paired=pairing.evidence(ask, out.budget) if pairing else None,
            )

        stream = self.stream(prepared, seeds)
        start = time.monotonic()
        try:
            with stream:
                for rec in stream:
                    rec, value = self.read(rec)
                    category, outcome = self.classify(rec)
                    out.tally.add(rec, category, outcome, value)
                    out.tally.no_number += self.numbers is not None and rec.ok and category is None
                    if out.tally.mostly_failed:
                        out.failed = out.tally.failure_signature(prepared.variant)
                        break
                    counted = rec.ok or category is not None  # an observation (a failed run may be one)
                    for sha, table in ends.items():  # the same seed at an end: the same observation?
                        theirs = table.get(rec.seed)
                        if counted and theirs is not None:
                            alike[sha][self.signature(rec, category) != theirs] += 1
                    self._feed(pairing, category, value, rec.seed)
                    if counted:
                        if gate is None or gate.needed(category, sum(out.tally.counts)):
                            out.evidence = judged()
                            if gate is not None:
                                gate.judged(out.tally.counts, out.evidence)
                        self.events.emit(RunsProgress(prepared.sha, out.tally.consumed, out.budget, out.tally.short()))
                        if out.evidence is not None and out.evidence.decision is not None:
                            break
                if gate is not None and gate.skipped:  # the runs ended on skipped ones: their answer
                    out.evidence = judged()
        except ServerError as exc:  # a cross-check arm whose server did not start
            out.server_error = str(exc)
        out.executed = stream.executed
        if out.executed:
            self.spent.running += time.monotonic() - start
        return out

    def stream(self, prepared: Prepared, seeds: list[int]) -> RunStream | TimedStream:
        """The commit's runs over `seeds`: stored ones replayed, missing ones made (kind time:
        each beside a timed run of the control, judge.timing)."""
        numbers = self.numbers
        if numbers is None or not numbers.timed:
            return self.runner.runs(prepared, seeds)
        assert numbers.sha is not None, "kind time has a control (config)"
        control = self.runner.prepare(numbers.sha)
        if control.executor is None:
            raise BisectbotError(f"reference.control: {numbers.sha[:12]} cannot be run for timing: {control.why}")
        pairs = TimedPairs(self.runner, prepared, control, seeds, self.cfg.statistic.warmup)
        return TimedStream(pairs, numbers.beside)

    def _feed(
        self, test: ControlPairing | NumberTest | None, category: int | None, value: float | None, seed: int
    ) -> None:
        """One counted run into the verdict's stateful test (a number, or a category paired with
        the control's run on its seed, whose growth the reference then shows)."""
        if isinstance(test, NumberTest):
            if value is not None:
                test.add(value, seed)
        elif test is not None and category is not None:
            test.add(category, seed)
            self.reference = test.control.reference

    def _test_for(self, ask: Ask, seeds: Sequence[int]) -> ControlPairing | NumberTest | None:
        """The stateful test one verdict feeds run by run: a numeric test, or the two-sample test
        against a control sample; None for a categorical test against an exact reference (its
        counts are all it needs) and for the bad-model runs."""
        if self.numbers is not None:
            return self.numbers.start(ask, seeds)
        if self.control is None or ask.mode == "bad-model":
            return None
        return self.control.pairing(self.cfg.test.tolerance, self.cfg.test.indifference, ask.q_bad, seeds, ask.beta)

    def _gate(self, ask: Ask, budget: int, paired: bool) -> sequential.JudgeGate | None:
        """For a plain test against the reference (or its BAD side alone), which runs can change
        its answer; None where every run must be judged (a control, ends to be alike, a quick
        step, the bad-model runs)."""
        if ask.mode not in ("reference", "depart") or ask.alike or paired or self.reference.control is not None:
            return None
        return sequential.JudgeGate(
            self.reference,
            alpha=ask.alpha,
            beta=ask.beta,
            tolerance=self.cfg.test.tolerance,
            eta=self.cfg.test.indifference,
            budget=budget,
        )

    def observations(self, sha: str) -> tuple[tuple[int, int], ...]:
        """The commit's stored runs on the common seeds (block 0), as (seed, category or −1 when
        not counted): what a commit run on the same seeds is compared with. Failed runs are left
        out unless they are an outcome (FAILED); a commit not built yet has none (nothing is
        built here).

        Asked for every end at every search step, so an answer is remembered until this process
        stores a run of the commit, marks a run input as written, or the categories change:
        finding it again means checking the kept binaries' and the inputs' sha256 and mixing a
        block of seeds, ~0.1 s a commit that delays the step's first run."""
        token = (self.runner.runs_version(sha), self.reference.names)
        if (known := self._observed.get(sha)) is not None and known[0] == token:
            return known[1]
        if not self.runner.built_already(sha):
            return ()  # not remembered: once it is built, the runs an earlier process stored count
        prepared = self.runner.prepare(sha)
        if prepared.executor is None:
            return ()
        seeds = set(self.runner.seed_block(sha, 0, SEED_BLOCK))
        out = []
        for seed, rec in sorted(self.runner.stored_runs(prepared).items()):
            if seed in seeds:
                rec = self.read(rec)[0]
                category = self.category(rec)
                if rec.ok or category is not None:
                    out.append((seed, self.signature(rec, category)))
        self._observed[sha] = (token, tuple(out))
        return tuple(out)

    def reruns(self, sha: str, count: int) -> tuple[SeedForSeed, int]:
        """The commit's first `count` seeds of block 0 run a second time (CommitRunner.rerunning,
        stored apart, so a resume replays them), compared with their first runs: the seeds both
        runs counted, and how many gave the same observation both times. Any that did not: the
        program is not deterministic per seed. Nothing when the commit cannot be run. Also the
        runs this call executed (none when every one was stored: a resume)."""
        prepared = self.runner.prepare(sha)
        if prepared.executor is None:
            return SeedForSeed(0, 0), 0
        seeds = self.runner.seed_block(sha, 0, count)
        twice = []
        executed = 0
        for which in (prepared, self.runner.rerunning(prepared)):
            with self.runner.runs(which, seeds) as stream:
                seen = {rec.seed: self._signed(rec) for rec in stream}
            executed += stream.executed
            twice.append({seed: c for seed, c in seen.items() if c is not None})
        return seed_for_seed(*twice), executed

    def _signed(self, rec: RunRecord) -> int | None:
        """What a run is compared by seed for seed (`signature`: a category, or for a number the
        number itself), None for a run not counted."""
        rec = self.read(rec)[0]
        category = self.category(rec)
        return None if category is None else self.signature(rec, category)

    def failed_runs(self, sha: str) -> dict[int, bool]:
        """The commit's stored runs on the common seeds (block 0): seed → whether the run failed
        (a crash, a timeout, output past its cap; a run the parse could not read did not fail).
        What two commits' crash rates are compared on (skips.failure_shift); nothing is built."""
        if not self.runner.built_already(sha):
            return {}
        prepared = self.runner.prepare(sha)
        if prepared.executor is None:
            return {}
        seeds = set(self.runner.seed_block(sha, 0, SEED_BLOCK))
        stored = self.runner.stored_runs(prepared).items()
        return {seed: not rec.ok and not rec.unreadable for seed, rec in stored if seed in seeds}

    def feed(self, sha: str, block: int = 0, start: int = 0, toward: Sequence[float] | None = None) -> "Feed":
        """The commit's runs one counted category at a time (sticky search, confirmation);
        `toward`: what a departing commit is expected to look like (a control's paired test)."""
        return Feed(self, sha, block, start, toward)

    def _reached(
        self,
        prepared: Prepared,
        ask: Ask,
        tally: Tally | None,
        verdict: Verdict,
        reason: str,
        *,
        evidence: tuple[float, float] = (0.0, 0.0),
        executed: int = 0,
        signature: str = "",
        judged: Mapping[str, float] | None = None,
    ) -> CommitVerdict:
        v = CommitVerdict.of(
            prepared.sha,
            self.subject(prepared.sha),
            ask,
            prepared.build,
            tally,
            verdict,
            f"{reason} (on its seeds run a second time)" if ask.rerun else reason,
            evidence=evidence,
            executed=executed,
            variant=prepared.variant,
            signature=signature,
            program=prepared.program if prepared.executor is not None and self.where == "here" else "",
            judged=judged,
        )
        self.events.emit(VerdictReached(v))
        return v


@dataclass
class _Measured:
    """One variant's runs at one commit, as far as they went."""

    tally: Tally
    budget: int
    evidence: stats.Evidence | None = None
    failed: str | None = None  # the runs mostly failed: their signature
    server_error: str | None = None
    executed: int = 0

    def verdict(self, tester: "CommitTester", prepared: Prepared, ask: Ask) -> CommitVerdict:
        tally, ev = self.tally, self.evidence
        if self.server_error is not None:
            return tester._reached(
                prepared,
                ask,
                tally,
                Verdict.SKIP,
                self.server_error,
                executed=self.executed,
                signature=masked(f"server: {self.server_error}"),
            )
        if ev is not None and ev.decision is not None:
            return tester._reached(
                prepared,
                ask,
                tally,
                ev.decision,
                ev.reason,
                evidence=(ev.log_e_bad, ev.log_e_good),
                executed=self.executed,
                judged=judged_of(ev),
            )
        reason = f"undecided after {tally.consumed} runs (budget {self.budget})" + (
            f"; {ev.reason}" if ev is not None else "; no run met the condition"
        )
        scores = (ev.log_e_bad, ev.log_e_good) if ev is not None else (0.0, 0.0)
        return tester._reached(
            prepared,
            ask,
            tally,
            Verdict.INCONCLUSIVE,
            reason,
            evidence=scores,
            executed=self.executed,
            judged=judged_of(ev) if ev is not None else None,
        )


def judged_of(ev: stats.Evidence) -> dict[str, float] | None:
    """What a numeric test made of its runs, as a verdict keeps it: θ's estimate, its interval,
    the runs the normal approximation waits for (None: not numeric)."""
    if ev.interval is None or ev.estimate is None:
        return None
    out = {"estimate": ev.estimate, "low": ev.interval[0], "high": ev.interval[1], "waits": float(ev.waits)}
    if ev.noise is not None:
        out["noise"] = ev.noise
    return out


def _skip_signature(prepared: Prepared) -> str:
    """How a commit that cannot be run fails: the build's status and first error, or why no
    command variant fits."""
    build = prepared.build
    if not build.ok:
        return masked(f"build {build.status}: {build.reason}")
    return masked(prepared.why)


class Feed:
    """One commit's runs, one counted category at a time in seed order, from the same run path
    as every verdict (stored runs replayed, missing ones run in parallel): the sticky search
    reads block 0, the confirmation reads block 1 from `start` (the seeds no earlier test of
    this bisect has looked at). `tally` counts what was fed, failures included."""

    def __init__(
        self, tester: CommitTester, sha: str, block: int = 0, start: int = 0, toward: Sequence[float] | None = None
    ):
        self.tester, self.sha, self.block, self.start = tester, sha, block, start
        self.prepared = tester.runner.prepare(sha)
        self.tally = Tally(tester.reference.names)
        self.seeds = self._seeds()
        self.stream = tester.stream(self.prepared, self.seeds) if self.prepared.executor is not None else None
        self.toward = toward
        # with a control-sample reference: the runs counted so far, paired with the control's
        # only once a test against the reference asks (the change test of a confirmation does
        # not, and the control's runs on these seeds would be spent for nothing)
        self.pairing: ControlPairing | NumberTest | None = None
        self._fed: list[tuple[int, int]] = []
        self._fed_numbers: list[tuple[float, int]] = []  # the same, for a numeric statistic

    def _seeds(self) -> list[int]:
        """The rest of the commit's block: a commit next to the boundary may need more runs than
        one verdict's budget (the sticky search as a whole is capped by test.search_runs)."""
        return self.tester.runner.seed_block(self.sha, self.block, SEED_BLOCK)[self.start :]

    def next(self) -> int:
        """The category of the commit's next counted run; `Untestable` when there is none.
        A command variant whose runs mostly fail gives way to the next one that fits."""
        runner = self.tester.runner
        while True:
            if self.stream is None:
                raise Untestable(self.prepared.why, _skip_signature(self.prepared))
            for rec in self.stream:
                rec, value = self.tester.read(rec)
                category, outcome = self.tester.classify(rec)
                self.tally.add(rec, category, outcome, value)
                self.tally.no_number += self.tester.numbers is not None and rec.ok and category is None
                if self.tally.mostly_failed:
                    signature = self.tally.failure_signature(self.prepared.variant)
                    retry = runner.variant_failed(self.prepared, self.tally.failure_reason())
                    if retry is None:
                        raise Untestable(self.tally.failure_reason(), signature)
                    self.stream.close()
                    self.prepared, self.tally = retry, Tally(self.tester.reference.names)
                    self.stream = self.tester.stream(retry, self.seeds)
                    break
                if self.tally.last_category is not None:
                    if value is not None:
                        self._pair_number(value, rec.seed)
                    else:
                        self._pair(self.tally.last_category, rec.seed)
                    return self.tally.last_category
            else:
                raise Untestable(f"its block of {SEED_BLOCK} seeds used up", f"block of {SEED_BLOCK} seeds used up")

    def _pair(self, category: int, seed: int) -> None:
        """With a control-sample reference: pair the run just counted with its control run
        (once a test against the reference has asked; until then it is only remembered)."""
        if self.tester.control is None:
            return
        if self.pairing is None:
            self._fed.append((category, seed))
            return
        assert isinstance(self.pairing, ControlPairing)
        self.pairing.add(category, seed)
        self.tester.reference = self.pairing.control.reference

    def _pair_number(self, value: float, seed: int) -> None:
        """A numeric statistic: the run's number into its test (once a test has asked)."""
        if self.pairing is None:
            self._fed_numbers.append((value, seed))
            return
        assert isinstance(self.pairing, NumberTest)
        self.pairing.add(value, seed)

    def paired_evidence(self, ask: Ask, budget: int) -> stats.Evidence | None:
        """The stateful test's verdict on the runs fed so far: a numeric test, or the two-sample
        test against a control sample (None: a categorical test against an exact reference)."""
        numbers = self.tester.numbers
        if numbers is not None:
            if self.pairing is None:
                self.pairing = numbers.start(ask, self.seeds)
                for value, seed in self._fed_numbers:
                    self.pairing.add(value, seed)
                self._fed_numbers.clear()
            return self.pairing.evidence(ask, budget)
        control = self.tester.control
        if control is None:
            return None
        if self.pairing is None:
            test = self.tester.cfg.test
            self.pairing = control.pairing(test.tolerance, test.indifference, self.toward, self.seeds, ask.beta)
            for category, seed in self._fed:
                self.pairing.add(category, seed)
            self._fed.clear()
            self.tester.reference = self.pairing.control.reference
        return self.pairing.evidence(ask, budget)

    def numbers_so_far(self) -> list[float]:
        """The numbers of the runs fed so far (a numeric statistic's change test)."""
        return list(self.tally.values)

    def verdict(
        self,
        verdict: Verdict,
        reason: str,
        signature: str = "",
        *,
        ask: Ask | None = None,
        tally: Tally | None = None,
        evidence: tuple[float, float] = (0.0, 0.0),
        executed: int | None = None,
        judged: Mapping[str, float] | None = None,
    ) -> CommitVerdict:
        """A verdict on this commit's runs (all fed so far, or the `tally` of a prefix of them);
        by default the side the sticky search put it on. `executed`: the runs this feed
        executed, unless another verdict on the same runs already counts them (then 0)."""
        ask = ask or Ask(role="sticky", alpha=0.0, beta=0.0, mode="sticky")
        if executed is None:
            executed = self.stream.executed if self.stream is not None else 0
        return self.tester._reached(
            self.prepared,
            ask,
            tally or self.tally,
            verdict,
            reason,
            executed=executed,
            signature=signature,
            evidence=evidence,
            judged=judged,
        )

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
