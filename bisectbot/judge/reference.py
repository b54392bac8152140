"""Reference stage: the distribution a correct build must produce, written down or computed.

Four ways, chosen in the config:
  (a) `reference.probs` (+ `condition_prob`): numbers written in the config;
  (b) `reference.compute.method: server`: the non-speculative `llama-server` built at a given
      commit, queried on 127.0.0.1 for post-sampling probabilities, then stopped;
  (c) `reference.compute.method: numpy`: a forward pass of the tiny GGUF model in numpy plus the
      sampler chain — independent of any llama.cpp build;
  (d) `reference.control`: no exact reference, but a known-good commit: its runs on the common
      seeds, paired seed for seed with the tested commit's runs (statistics.control_sample: a
      two-sample test; the control grows while tests need it).
The reference is resolved once, before any commit is judged, and handed to the verdict stage.
Computed references are cached in the state database by (method, commit, model sha256, prompt,
sampler settings), so a bisect computes its reference once.

Outcome probabilities are P(outcome | prompt + condition token); the condition probability is
P(first generated token = condition token | prompt). Outcomes the reference gives probability 0
are left out: seeing one proves BAD.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from bisectbot.config import Config
from bisectbot.config.sections import ComputedReference
from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.errors import BisectbotError
from bisectbot.events import ControlStarted, RunsProgress
from bisectbot.judge.parse import observe
from bisectbot.judge.runner import CommitRunner, Prepared
from bisectbot.processes.procs import clean_env
from bisectbot.records.commits import UNREADABLE, Ask, CommitVerdict, Tally
from bisectbot.records.keys import json_key
from bisectbot.records.reports import Condition, NumericReference, OutcomeAt, ReferenceSummary
from bisectbot.state.files import file_sha256
from bisectbot.state.storage import Store
from bisectbot.statistics import means, stats
from bisectbot.statistics.control_sample import PairedTest
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.pooling import Pooling, bucket_name, pool_control

if TYPE_CHECKING:
    from bisectbot.llama.forward import Sampling


@dataclass(frozen=True)
class ResolvedReference:
    probs: dict[str, float]
    condition_prob: float | None
    source: str  # human-readable: where the numbers come from
    control: dict[str, int] | None = None  # the control sample's counts, when it is one
    # the control's outcomes in seed order, None: failed (FAILED when failures are an outcome) (GrowingControl)
    outcomes: tuple[str | None, ...] = ()
    failures: bool = False  # failed runs are a category (statistic.failures: outcome); never cached
    numeric: bool = False  # statistic.kind mean or time: a number per run (judge.numeric); never cached
    mean: float | None = None  # the exact mean (reference.mean), or the control's first runs' mean
    max_categories: int | None = None  # statistic.max_categories: past it the tail is pooled; never cached
    pooling: Pooling | None = None  # a control's, fixed by its first runs (an exact one's: from probs)

    def stats_reference(self) -> stats.Reference:
        """The categories the runs are counted in: for a number, every readable run is one
        category (VALUE): its tests are judge.numeric's, on the numbers themselves."""
        if self.numeric:
            return stats.Reference((stats.VALUE, stats.OTHER), (1.0, 0.0))
        if self.control is not None:
            return stats.Reference.from_control(self.control, failures=self.failures, pooling=self.pooling)
        return stats.Reference.from_probs(
            self.probs, self.condition_prob, failures=self.failures, max_categories=self.max_categories
        )

    def summary(self, cfg: Config) -> ReferenceSummary:
        """The reference as reports show it: its probabilities, source, and the test's categories."""
        ref = self.stats_reference()
        numeric = None
        if self.numeric:
            spec = number_spec(cfg, self)
            b = spec.band
            numeric = NumericReference(
                kind=cfg.statistic.kind,
                scale=spec.scale.kind,
                mean=self.mean,
                tolerance=cfg.test.tolerance,
                eta=cfg.test.indifference,
                relative=cfg.test.relative or cfg.statistic.kind == "time",
                bounds=list(cfg.statistic.bounds) if cfg.statistic.bounds else None,
                good=[b.good_lo, b.good_hi],
                bad=[b.bad_lo, b.bad_hi],
                exact=spec.exact,
                wall_time=cfg.statistic.wall_time,
            )
        return ReferenceSummary(
            probs=dict(self.probs),
            condition_prob=self.condition_prob,
            source=self.source,
            categories=list(ref.names),
            category_probs=list(ref.probs),
            condition=Condition(position=cfg.statistic.condition.position, token=cfg.statistic.condition.token)
            if cfg.statistic.condition
            else None,
            outcome=OutcomeAt(position=cfg.statistic.position),
            numeric=numeric,
            pooling=pooled_summary(ref.pooling, cfg.test.tolerance),
        )


def pooled_summary(pool: Pooling | None, tolerance: float) -> dict[str, Any] | None:
    """What the JSON report says of a pooled reference: each bucket's outcomes, the mass GOOD
    leaves for them, how it was bounded, and the tolerance GOOD is tested at."""
    if pool is None:
        return None
    return {
        "buckets": {bucket_name(i + 1): list(members) for i, members in enumerate(pool.buckets)},
        "kept": len(pool.kept),
        "hidden": pool.hidden,
        "bound": pool.how,
        "good_tolerance": tolerance - pool.hidden,
    }


def number_spec(cfg: Config, resolved: ResolvedReference) -> means.Spec:
    """The numeric test the config asks for (statistics.means.spec), the control's first runs
    setting a relative floor."""
    test = cfg.test
    return means.spec(
        cfg.statistic.kind,
        tolerance=test.tolerance,
        eta=test.indifference,
        relative=test.relative,
        value=cfg.reference.mean,
        control_mean=resolved.mean if cfg.reference.mean is None else None,
        bounds=cfg.statistic.bounds,
    )


def resolve_reference(cfg: Config, runner: CommitRunner | None = None) -> ResolvedReference:
    """The config's reference; `runner` (builds, runs, the state database) is needed for a
    control sample and a server reference, and caches computed ones. With `statistic.failures:
    outcome` its categories include FAILED (the numbers do not change: a correct build never fails).
    More outcomes than `statistic.max_categories`: the tail pooled into buckets (refused when
    what they can hide leaves GOOD no tolerance above eta)."""
    resolved = replace(
        _resolve(cfg, runner), failures=cfg.statistic.failures_counted, max_categories=cfg.statistic.max_categories
    )
    if resolved.control is not None:
        outcomes = resolved.outcomes
        pool = pool_control(
            outcomes, cfg.statistic.max_categories, cfg.test.beta, (stats.FAILED, stats.MISSED), stats.OTHER
        )
        resolved = replace(resolved, pooling=pool)
    pool = resolved.stats_reference().pooling
    if pool is not None and cfg.test.tolerance - pool.hidden <= cfg.test.indifference:
        more = " or reference.control.runs (the control's first sample)" if resolved.control is not None else ""
        raise BisectbotError(
            f"statistic.max_categories: {pool.describe(cfg.test.tolerance)}, not above eta "
            f"{cfg.test.indifference:g}: raise statistic.max_categories (null: no pooling){more}"
        )
    return resolved


def _resolve(cfg: Config, runner: CommitRunner | None) -> ResolvedReference:
    ref = cfg.reference
    if ref.probs is not None:
        return ResolvedReference(dict(ref.probs), ref.condition_prob, "config")
    if ref.mean is not None:
        return ResolvedReference({}, None, "config", numeric=True, mean=float(ref.mean))
    if ref.control is not None and cfg.statistic.numeric:
        return _number_control(cfg, runner)
    if ref.control is not None:
        if ref.control.unbound:
            raise BisectbotError(
                "the reference is like the good end (reference: good), and only a bisect has one: "
                "for one commit give --reference REF (the commit to measure it at)"
            )
        if runner is None:
            raise BisectbotError("reference.control needs runs of the control commit")
        sha, outcomes = control_sample(cfg, runner, ref.control.commit, ref.control.runs)
        counts = dict(Counter(o for o in outcomes if o is not None))
        total = sum(counts.values())
        return ResolvedReference(
            {k: v / total for k, v in counts.items()},
            None,
            control_source(total, sha, ref.control.good_end),
            counts,
            tuple(outcomes),
        )
    comp = ref.compute
    assert comp is not None
    model = cfg.resolve(comp.model)
    if not model.is_file():
        raise BisectbotError(f"reference.compute.model: {model} does not exist")
    cond = cfg.statistic.condition.token if cfg.statistic.condition else None
    key_parts = {
        "method": comp.method,
        "model": file_sha256(model),
        "prompt": comp.prompt,
        "cond": cond,
        "sampling": [comp.top_k, comp.top_p, comp.min_p, comp.temp, comp.samplers],
    }
    if (comp.repeat_penalty, comp.repeat_last_n) != (1.0, 64):  # keys cached before they existed stay
        key_parts["penalty"] = [comp.repeat_penalty, comp.repeat_last_n]
    store = runner.state.store if runner is not None else None
    if comp.method == "numpy":
        return _cached(store, key_parts, lambda: _numpy(comp, model, cond))
    if runner is None:
        raise BisectbotError("reference.compute.method server needs a build of llama-server")
    sha = runner.workspace.resolve(str(comp.commit))
    build_cfg = cfg.build.model_copy(  # llama-server is a cmake target, whatever builds the program
        update={
            "kind": "cmake",
            "command": None,
            "incremental": False,
            "targets": [comp.target],
            "binaries": {"server": comp.binary},
            "variants": None,
        }
    )
    build = runner.builder.ensure(sha, build_cfg, inputs=False)
    if not build.ok:
        raise BisectbotError(f"reference: cannot build {comp.target} at {sha[:12]}: {build.reason}")
    key_parts["commit"] = sha
    binary = Path(build.binaries["server"])
    env = clean_env(drop=cfg.secret_env_names)
    return _cached(store, key_parts, lambda: _server(comp, binary, model, cond, sha, env))


def _number_control(cfg: Config, runner: CommitRunner | None) -> ResolvedReference:
    """A numeric statistic's control: its first runs' numbers (their mean for reports); for a
    timing none ahead, as every control run is timed beside a tested one (judge.timing)."""
    ref = cfg.reference
    assert ref.control is not None
    if ref.control.unbound:
        raise BisectbotError(
            "the reference is like the good end (reference: good), and only a bisect has one: "
            "for one commit give --reference REF (the commit to measure it at)"
        )
    if runner is None:
        raise BisectbotError("reference.control needs runs of the control commit")
    if cfg.statistic.kind == "time":  # timed beside each tested run, never ahead of it (judge.timing)
        sha = runner.workspace.resolve(ref.control.commit)
        where = f"the good end {sha[:12]}" if ref.control.good_end else sha[:12]
        return ResolvedReference({}, None, f"runs of {where} timed beside each run", numeric=True)
    sha, outcomes = control_sample(cfg, runner, ref.control.commit, ref.control.runs)
    numbers = [float(o) for o in outcomes if o is not None and _is_number(o) and math.isfinite(float(o))]
    if not numbers:
        raise BisectbotError(
            f"reference.control: none of the {len(outcomes)} runs at {sha[:12]} printed a number at "
            f"statistic.outcome.position {cfg.statistic.position}"
        )
    mean = sum(numbers) / len(numbers)
    return ResolvedReference(
        {},
        None,
        control_source(len(numbers), sha, ref.control.good_end),
        None,
        tuple(outcomes),
        numeric=True,
        mean=mean,
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def control_source(total: int, sha: str, good_end: bool, grown: bool = False) -> str:
    """How reports name a control-sample reference."""
    where = f"the good end {sha[:12]}" if good_end else sha[:12]
    lead = "like the good end: " if good_end else ""
    how = " (grown as tests needed, paired seed for seed)" if grown else ""
    return f"{lead}control sample of {total} runs at {where}{how}"


def control_sample(cfg: Config, runner: CommitRunner, ref: str, runs: int) -> tuple[str, list[str | None]]:
    """The first `runs` runs of a known-good commit on the common seeds (block 0, where every
    commit is tested): their outcomes in seed order, None where a run failed (FAILED when
    failed runs are an outcome)."""
    sha = runner.workspace.resolve(ref)
    return sha, control_runs(cfg, runner, sha, runner.seed_block(sha, 0, runs), 0)


def control_runs(
    cfg: Config, runner: CommitRunner, sha: str, seeds: Sequence[int], start: int, fresh: bool = False
) -> list[str | None]:
    """The control commit's runs on `seeds` (stored like any run, so a resume replays them and a
    test of the same commit reuses them): their outcomes in seed order (MISSED for a missed
    condition), None for a failed run (FAILED when failed runs are an outcome:
    `statistic.failures`). Like every test, a command variant whose runs mostly
    fail gives way to the next one that fits the binary; when none is left, or more than half
    of the runs fail, one line says why (exit status or signal, the program's last error line,
    the command variant)."""
    counted = cfg.statistic.failures_counted
    prepared = runner.prepare(sha)
    runner.events.emit(ControlStarted(sha, len(seeds), start, fresh))
    while True:
        if prepared.executor is None:
            raise BisectbotError(f"reference.control: {sha[:12]} cannot be tested: {prepared.why}")
        tally, retry = Tally(()), None
        outcomes: list[str | None] = []
        with runner.runs(prepared, list(seeds)) as stream:
            for rec in stream:
                tally.add(rec, None)
                if not rec.ok and counted:
                    outcomes.append(stats.FAILED)
                elif rec.ok:
                    obs = observe(rec.tokens or (), cfg.statistic)
                    outcome = obs.outcome if obs.outcome is not None else stats.OTHER
                    outcomes.append(outcome if obs.met_condition else stats.MISSED)
                else:
                    outcomes.append(None)
                if tally.mostly_failed and not counted:
                    retry = runner.variant_failed(prepared, tally.failure_reason())
                    if retry is None:
                        raise BisectbotError(
                            f"reference.control: {_failing(tally, prepared, sha)}; no other command variant fits"
                        )
                    break
                runner.events.emit(RunsProgress(sha, len(outcomes), len(seeds), "control"))
        runner.control_executed += stream.executed
        if retry is None:
            break
        prepared = retry
    if not counted and outcomes.count(None) * 2 > len(outcomes):
        raise BisectbotError(f"reference.control: {_failing(tally, prepared, sha)}")
    return outcomes


def _failing(tally: Tally, prepared: Prepared, sha: str) -> str:
    """One line on runs that fail or whose output the parse cannot read, each kind apart: how
    many and how, which command, the last one's reason (its exit status or signal and error
    line; or its output quoted and the parse key it fails)."""
    unread = sum(n for status, n in tally.failures.items() if status in UNREADABLE)
    failed = sum(tally.failures.values()) - unread
    kinds = ", ".join(f"{n} {status}" for status, n in tally.failures.most_common() if status not in UNREADABLE)
    where = f"{tally.consumed} runs at {sha[:12]}"
    said = [f"{failed} of {where} failed ({kinds})"] if failed else []
    if unread:
        said.append(f"{unread} do not match parse" if said else f"{unread} of {where} do not match parse")
    return f"{' and '.join(said) or f'none of {where} failed'} with command variant {prepared.variant}; {tally.last_reasons()}"


def control_cap(cfg: Config) -> int:
    """How far along the common seeds the control may run: as far as the longest test the budget
    allows (run.max_runs), unless reference.control.max_runs says less."""
    control = cfg.reference.control
    assert control is not None
    return min(cfg.run.max_runs, control.max_runs) if control.max_runs else cfg.run.max_runs


class GrowingControl:
    """The control sample of `reference.control`: the control commit's runs, paired seed for
    seed with tested runs by `statistics.control_sample.PairedTest`, and grown while a test needs
    more of them.

    A tested run on seed s is paired with the control's run on the same seed s: a commit that
    behaves like the control prints the same there, and the pair tells nothing apart (z = 0),
    so the test is short where the commits agree (common random numbers). On the common seeds
    (block 0, where every search step runs) the control is one sample grown in order, as long
    as the longest test, not the sum of the tests; when the control commit is the good end, its
    runs are the good end's own. A test on a commit's fresh seeds (the confirmation's, block 1)
    has the control run on those very seeds too, a few at a time ahead of the test (FRESH_BATCH),
    so that a parent that behaves like the control passes as quickly there. Growth on the
    common seeds asks for whole blocks (a tenth of its size or BATCH runs at least), up to
    `control_cap`. Its categories stay those of the first sample: a later outcome it never
    showed counts as OTHER, as the tests count it (a coarsening both sides share); a missed
    condition without a MISSED category is not counted. A pair whose control run failed is
    left out."""

    GROWTH = 0.1  # of its size, at least
    BATCH = 256  # runs, at least
    FRESH_BATCH = 32  # control runs on a test's fresh seeds, ahead of it

    def __init__(self, cfg: Config, runner: CommitRunner, resolved: ResolvedReference):
        control = cfg.reference.control
        assert control is not None and resolved.control is not None
        self.cfg, self.runner, self.resolved = cfg, runner, resolved
        self.sha = runner.workspace.resolve(control.commit)
        self.cap = control_cap(cfg)
        self.reference = resolved.stats_reference()
        self.by_index = self._categories(resolved.outcomes)  # the category of run i (None: not counted)
        self.common = {seed: i for i, seed in enumerate(runner.seed_block(self.sha, 0, SEED_BLOCK))}
        self.fresh: dict[int, int | None] = {}  # control runs off the common seeds, by seed

    @property
    def attempted(self) -> int:
        """Control runs on the common seeds so far (failures included): seeds 0 … attempted − 1."""
        return len(self.by_index)

    def _categories(self, outcomes: Sequence[str | None]) -> list[int | None]:
        """Outcomes as the reference's categories, as tests count them (Reference.index)."""
        out: list[int | None] = []
        for outcome in outcomes:
            missed = outcome == stats.MISSED
            out.append(None if outcome is None else self.reference.index(None if missed else outcome, not missed))
        return out

    def pairing(
        self,
        tolerance: float,
        eta: float,
        toward: Sequence[float] | None = None,
        seeds: Sequence[int] = (),
        level: float | None = None,
    ) -> "ControlPairing":
        """A fresh two-sample test of one commit against this control (`toward`: the
        distribution it is expected to look like if it departs, PairedTest; `seeds`: the
        tested commit's seeds in the order its runs come, to run the control ahead on them;
        `level`: its beta, so that GOOD's least is computed only when it could reach 1/beta)."""
        test = PairedTest(len(self.reference.names), tolerance, eta, toward, self.reference.hidden, level)
        return ControlPairing(self, test, seeds)

    def pair(self, test: PairedTest, category: int, index: int) -> bool:
        """Pair a tested run (in `category`) with control run `index` on the common seeds,
        growing the control when it is not that long yet; False when the cap leaves no run for it."""
        if index >= self.cap:
            return False
        if index >= len(self.by_index):
            self._grow(index + 1)
        partner = self.by_index[index]
        if partner is not None:
            test.add(category, partner)
        return True

    def pair_fresh(self, test: PairedTest, category: int, seed: int, ahead: Sequence[int]) -> None:
        """Pair a tested run on a seed off the common ones with the control's run on that seed,
        running the control on it (and on the next seeds of `ahead`) when it has not yet."""
        if seed not in self.fresh:
            batch = [seed] + [s for s in ahead if s != seed and s not in self.fresh and s not in self.common]
            batch = batch[: self.FRESH_BATCH]
            outcomes = control_runs(self.cfg, self.runner, self.sha, batch, self.attempted + len(self.fresh), True)
            self.fresh.update(zip(batch, self._categories(outcomes)))
            self._recount()
        partner = self.fresh[seed]
        if partner is not None:
            test.add(category, partner)

    def extra_runs(self, verdicts: Sequence[CommitVerdict]) -> int:
        """Control runs no verdict counts among its runs (the report's `control_runs`): all of
        them, less those the control commit's own tests on the common seeds read."""
        read = max(
            (
                v.runs
                for v in verdicts
                if v.sha == self.sha and v.arm == "main" and v.seeds and self.common.get(v.seeds[0]) == 0
            ),
            default=0,
        )
        return max(0, self.attempted - read) + len(self.fresh)

    def evidence(self, test: PairedTest, ask: Ask, budget: int, capped: bool = False) -> stats.Evidence:
        """The test's verdict so far (`capped`: the control could not grow for its next run)."""
        if capped:
            return stats.Evidence(
                Verdict.INCONCLUSIVE,
                test.n,
                test.log_e_bad,
                test.log_e_good,
                f"undecided after {test.n} runs: the control reached its cap of {self.cap:,} runs "
                "(raise run.max_runs or reference.control.max_runs)",
            )
        return test.evidence(alpha=ask.alpha, beta=ask.beta, max_runs=budget, pairing=" on the same seeds")

    def _grow(self, need: int) -> None:
        """Run more control runs until `need` are there (see GROWTH, BATCH; within the cap)."""
        size = len(self.by_index)
        target = min(self.cap, max(need, size + self.BATCH, int(size * (1 + self.GROWTH))))
        seeds = self.runner.seed_block(self.sha, 0, target)[size:]
        outcomes = control_runs(self.cfg, self.runner, self.sha, seeds, size)
        self.by_index += self._categories(outcomes)
        self._recount()

    def _recount(self) -> None:
        """The reference the reports show: the control's counts as they are now."""
        control = self.cfg.reference.control
        assert control is not None
        names = self.reference.names
        counts = {name: 0 for name in names}
        for index in [*self.by_index, *self.fresh.values()]:
            if index is not None:
                counts[names[index]] += 1
        total = sum(counts.values())
        self.resolved = replace(
            self.resolved,
            probs={k: v / total for k, v in counts.items()},
            source=control_source(total, self.sha, control.good_end, grown=True),
            control=counts,
            outcomes=(),
        )
        self.reference = self.resolved.stats_reference()

    def grown(self, summary: ReferenceSummary) -> ReferenceSummary:
        """`summary` (made when the job started) with the control's counts as they ended."""
        return replace(
            summary,
            probs=dict(self.resolved.probs),
            source=self.resolved.source,
            categories=list(self.reference.names),
            category_probs=list(self.reference.probs),
        )


class ControlPairing:
    """One commit's test against the control as its runs come: each counted run paired with the
    control's run on the same seed, until the control can grow no more along the common seeds
    (`capped`)."""

    def __init__(self, control: GrowingControl, test: PairedTest, seeds: Sequence[int] = ()):
        self.control, self.test, self.capped = control, test, False
        self.seeds = list(seeds)
        self._at = {seed: i for i, seed in enumerate(self.seeds)}

    def add(self, category: int, seed: int) -> None:
        if self.capped:
            return
        index = self.control.common.get(seed)
        if index is not None:
            self.capped = not self.control.pair(self.test, category, index)
            return
        at = self._at.get(seed, len(self.seeds))
        self.control.pair_fresh(self.test, category, seed, self.seeds[at + 1 : at + GrowingControl.FRESH_BATCH])

    def evidence(self, ask: Ask, budget: int) -> stats.Evidence:
        return self.control.evidence(self.test, ask, budget, self.capped)


def _cached(store: Store | None, parts: dict, compute: Callable[[], ResolvedReference]) -> ResolvedReference:
    key = json_key(parts, 16)
    if store is not None and (hit := store.cached_reference(key)) is not None:
        return ResolvedReference(**hit)
    resolved = compute()
    if store is not None:
        # a computed reference has no control outcomes, and whether failures are a category and
        # how many categories the tests take are the config's, not the reference's: the cached
        # record keeps its old shape
        apart = ("outcomes", "failures", "numeric", "mean", "max_categories", "pooling")
        store.put_reference(key, {k: v for k, v in asdict(resolved).items() if k not in apart})
    return resolved


def _support(probs: dict[str, float]) -> dict[str, float]:
    """Drop zero (cut) tokens and renormalise the rest exactly."""
    kept = {k: v for k, v in probs.items() if v > 1e-12}
    total = sum(kept.values())
    return {k: v / total for k, v in kept.items()}


def _sampling(comp: ComputedReference) -> "Sampling":
    """The sampler chain's settings the reference is computed with (numpy or llama-server)."""
    from bisectbot.llama.forward import Sampling

    return Sampling(
        top_k=comp.top_k,
        top_p=comp.top_p,
        min_p=comp.min_p,
        temp=comp.temp,
        repeat_penalty=comp.repeat_penalty,
        repeat_last_n=comp.repeat_last_n,
    )


def _numpy(comp: ComputedReference, model: Path, cond: str | None) -> ResolvedReference:
    from bisectbot.llama import forward

    tiny = forward.load_gguf(model)
    ids = forward.tokenize(tiny, comp.prompt)
    sampling = _sampling(comp)
    if cond is None:
        return ResolvedReference(
            _support(forward.next_token_probs(model, ids, **sampling)), None, f"numpy forward pass of {model.name}"
        )
    cond_p = forward.condition_prob(model, ids, cond, **sampling)
    if cond_p <= 0:
        raise BisectbotError(
            f"reference: the condition token {cond!r} has probability 0 after "
            f"{comp.prompt!r}: no run could ever meet it"
        )
    probs = forward.next_token_probs(model, ids + [tiny.vocab.index(cond)], **sampling)
    return ResolvedReference(_support(probs), cond_p, f"numpy forward pass of {model.name}")


def _server(
    comp: ComputedReference, binary: Path, model: Path, cond: str | None, sha: str, env: dict[str, str]
) -> ResolvedReference:
    from bisectbot.llama.server import ServerSampling, server_reference

    kw = ServerSampling(**_sampling(comp), samplers=comp.samplers, timeout=comp.timeout, env=env)
    kw["n_probs"] = max(8, comp.top_k)  # every token top-k keeps (the open vocabulary's 40)
    first = server_reference(binary, model, comp.prompt, **kw)
    source = f"llama-server at {sha[:12]} (post-sampling probabilities)"
    if cond is None:
        return ResolvedReference(_support(first), None, source)
    if first.get(cond, 0.0) <= 0:
        raise BisectbotError(f"reference: llama-server gives the condition token {cond!r} probability 0")
    probs = server_reference(binary, model, comp.prompt + cond, **kw)
    return ResolvedReference(_support(probs), first[cond], source)


def with_method(cfg: Config, method: str | None, commit: str | None, config_path: str) -> Config:
    """The config with `bisectbot reference --method/--commit` applied: the reference computed
    another way (numpy or server, at COMMIT) from the same model and prompt; "config" or none
    leaves it as the config says."""
    if not method or method == "config":
        return cfg
    if cfg.reference.compute is None:
        raise BisectbotError(
            f"{config_path}: reference.compute is not set, so --method {method} has no model and prompt to work from"
        )
    update: dict[str, object] = {"method": method}
    if commit:
        update["commit"] = commit
    comp = cfg.reference.compute.model_copy(update=update)
    if comp.method == "server" and not comp.commit:
        raise BisectbotError("--method server needs --commit REF")
    return cfg.model_copy(update={"reference": cfg.reference.model_copy(update={"compute": comp})})
