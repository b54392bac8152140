"""Verdict stage: one commit → build → runs → sequential test → good / bad / skip / ….

`Tester.verdict` makes sure the commit is built (once, ever), feeds its runs in seed order to
the sequential test and stops as soon as the test decides. Everything it does is stored, so
asking again for the same verdict replays the database instead of running anything.

Seed blocks: a commit's main test uses seeds [first_seed, first_seed + max_runs); the final
re-test of the culprit and its parent uses the next block, so it sees fresh seeds and is
independent of the verdicts that led the search there.
"""

from __future__ import annotations

from typing import Sequence

from bisectbot.config import Config
from bisectbot.core import stats
from bisectbot.core.outcome import Verdict
from bisectbot.core.records import Ask, CommitVerdict, RunRecord, Tally
from bisectbot.edges.procs import ServerError
from bisectbot.pipeline.events import Events, RunsProgress, VerdictReached
from bisectbot.pipeline.parse import observe
from bisectbot.pipeline.runner import CommitRunner, Prepared


def judge(counts: Sequence[int], ask: Ask, reference: stats.Reference, *, tolerance: float,
          budget: int) -> stats.Evidence:
    """The sequential test the question asks for, on the counts so far (pure).

    reference: the generic test against the reference (or its control sample);
    two-point: bisect mode, like the good endpoint or like the bad endpoint's q̂ (`ask.q_bad`);
    bad-model: no test, keep measuring the (already BAD) endpoint until q̂ is good enough
    relative to the size of the bug (stats.bad_endpoint_enough)."""
    if ask.mode == "bad-model":
        enough = stats.bad_endpoint_enough(counts, reference)
        return stats.Evidence(Verdict.BAD if enough else None, sum(counts), 0.0, 0.0,
                              f"bad-endpoint model from {sum(counts)} counted runs")
    if ask.mode == "two-point":
        assert ask.q_bad is not None
        return stats.test_two_point(counts, reference.as_point(), ask.q_bad,
                                    alpha=ask.alpha, beta=ask.beta, max_runs=budget)
    if reference.control is not None:
        return stats.test_against_control(counts, reference, alpha=ask.alpha, beta=ask.beta,
                                          tolerance=tolerance, max_runs=budget)
    return stats.test_against_reference(counts, reference, alpha=ask.alpha, beta=ask.beta,
                                        tolerance=tolerance, max_runs=budget)


class Untestable(Exception):
    """A commit the sticky search cannot use (cannot be built or run, runs mostly fail)."""


class Tester:
    """Judges commits of one config against one reference; every build and run is remembered.

    Each verdict it reaches is also emitted (`VerdictReached`), so a job can store it as it
    happens."""

    def __init__(self, cfg: Config, runner: CommitRunner, reference: stats.Reference, events: Events):
        self.cfg, self.runner, self.reference, self.events = cfg, runner, reference, events

    def subject(self, sha: str) -> str:
        return self.runner.workspace.info(sha).subject

    def category(self, rec: RunRecord) -> int | None:
        """Which category of the reference one run falls in (None: failed, or not counted)."""
        if not rec.ok:
            return None
        obs = observe(rec.tokens or (), self.cfg.statistic)
        return self.reference.index(obs.outcome, obs.met_condition)

    def verdict(self, sha: str, ask: Ask) -> CommitVerdict:
        """The commit's answer to `ask` (on a cross-check arm when `ask.arm` names one)."""
        self.events.check()
        runner = self.runner
        prepared = runner.prepare(sha) if ask.arm == "main" else runner.prepare_arm(sha, ask.arm)
        if prepared.executor is None:
            return self._reached(prepared, ask, None, Verdict.SKIP, prepared.why)
        seeds = runner.seed_block(ask.block)
        budget = len(seeds)
        tally = Tally(self.reference.names)
        evidence: stats.Evidence | None = None
        skip: str | None = None
        stream = runner.runs(prepared, seeds)
        try:
            with stream:
                for rec in stream:
                    tally.add(rec, self.category(rec))
                    if tally.mostly_failed:
                        skip = tally.failure_reason()
                        break
                    if rec.ok:
                        evidence = judge(tally.counts, ask, self.reference,
                                         tolerance=self.cfg.test.tolerance, budget=budget)
                        self.events.emit(RunsProgress(sha, tally.consumed, budget, tally.short()))
                        if evidence.decision is not None:
                            break
        except ServerError as exc:  # a cross-check arm whose server did not start
            return self._reached(prepared, ask, tally, Verdict.SKIP, str(exc), executed=stream.executed)
        if skip is not None:
            verdict, reason = Verdict.SKIP, skip
        elif evidence is not None and evidence.decision is not None:
            verdict, reason = evidence.decision, evidence.reason
        else:
            verdict = Verdict.INCONCLUSIVE
            reason = (f"undecided after {tally.consumed} runs (budget {budget})"
                      + (f"; {evidence.reason}" if evidence is not None else "; no run met the condition"))
        scores = (evidence.log_e_bad, evidence.log_e_good) if evidence is not None else (0.0, 0.0)
        return self._reached(prepared, ask, tally, verdict, reason, evidence=scores, executed=stream.executed)

    def sticky_feed(self, sha: str) -> "StickyFeed":
        return StickyFeed(self, sha)

    def _reached(self, prepared: Prepared, ask: Ask, tally: Tally | None, verdict: Verdict, reason: str,
                 *, evidence: tuple[float, float] = (0.0, 0.0), executed: int = 0) -> CommitVerdict:
        v = CommitVerdict.of(prepared.sha, self.subject(prepared.sha), ask, prepared.build, tally,
                             verdict, reason, evidence=evidence, executed=executed, variant=prepared.variant)
        self.events.emit(VerdictReached(v))
        return v


class StickyFeed:
    """One commit's runs for the sticky bisection, one category at a time in seed order, from
    the same run path as every verdict (stored runs replayed, missing ones run in parallel)."""

    def __init__(self, tester: Tester, sha: str):
        self.tester, self.sha = tester, sha
        self.prepared = tester.runner.prepare(sha)
        self.tally = Tally(tester.reference.names)
        self.stream = (tester.runner.runs(self.prepared, tester.runner.seed_block(0))
                       if self.prepared.executor is not None else None)

    def next(self) -> int:
        """The category of the commit's next counted run; `Untestable` when there is none."""
        if self.stream is None:
            raise Untestable(self.prepared.why)
        for rec in self.stream:
            self.tally.add(rec, self.tester.category(rec))
            if self.tally.mostly_failed:
                raise Untestable(self.tally.failure_reason())
            if self.tally.last_category is not None:
                return self.tally.last_category
        raise Untestable(f"seed budget of {self.tester.cfg.run.max_runs} runs used up")

    def verdict(self, verdict: Verdict, reason: str) -> CommitVerdict:
        """The side the search put this commit on, as a verdict like any other."""
        ask = Ask(role="sticky", alpha=0.0, beta=0.0, mode="sticky")
        executed = self.stream.executed if self.stream is not None else 0
        return self.tester._reached(self.prepared, ask, self.tally, verdict, reason, executed=executed)

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
