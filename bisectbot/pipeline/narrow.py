"""Narrow stage: before the search, drop the commits that cannot change the binary.

Both ends of the range are built first (the endpoint stage needs them anyway, and the stored
builds are reused there); each build records the repository files its targets were compiled
from. A commit between them whose changes touch none of those inputs, by the conservative rule
of `core.inputs`, builds the same binary as its parent and is skipped as equivalent; so are the
commits that touch none of `--paths` when given. The search then runs over the N' commits left,
and the report says what each named commit stands for.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Sequence

from bisectbot.config import Config
from bisectbot.core import stats
from bisectbot.core.inputs import InputRule, Narrowed, narrow
from bisectbot.core.records import BuildRecord
from bisectbot.edges.workspace import Workspace
from bisectbot.pipeline.events import Events, LineNarrowed
from bisectbot.pipeline.plan import BisectPlan, Narrowing


def config_paths(cfg: Config) -> tuple[str, ...]:
    """Repository paths the config's command names (`{source}/…`): the program reads them."""
    out = []
    for variant in cfg.run.templates:
        for arg in variant.argv:
            out += re.findall(r"\{source\}/([^\s{}=]+)", arg)
    return tuple(dict.fromkeys(out))


def narrow_plan(
    plan: BisectPlan,
    cfg: Config,
    workspace: Workspace,
    build: Callable[[Sequence[str]], list[BuildRecord]],
    events: Events,
) -> BisectPlan:
    """The plan with its line narrowed to the commits that can change the binary; `build`
    builds commits (here, or on a cluster's workers) and gives their records."""
    how = plan.narrowing
    if not how.enabled and not how.paths:
        return plan
    events.check()  # a cancelled job stops before it builds anything
    full = plan.line
    rule: InputRule | None = None
    if how.enabled:
        ends = build([full[0], full[-1]])
        known = [b.inputs for b in ends if b.ok and b.inputs is not None]
        if len(known) == 2:
            rule = InputRule(frozenset().union(*map(frozenset, known)), (*config_paths(cfg), *how.also))
    changes = workspace.changes(full[0], full[-1])
    narrowed = narrow(full, changes, rule, how.paths, keep=frozenset(plan.user_skipped))
    events.emit(LineNarrowed(len(narrowed.line), len(full), rule is not None or not how.enabled))
    level = min(cfg.test.alpha, cfg.test.beta, stats.step_level(len(narrowed.line), cfg.test.confidence))
    return replace(plan, line=narrowed.line, narrowed=_with_rule(narrowed, rule, how), level=level)


def _with_rule(narrowed: Narrowed, rule: InputRule | None, how: Narrowing) -> Narrowed:
    if not how.enabled:
        text = "every commit kept (--all-commits)"
    elif rule is None:
        text = "inputs unknown at an end (no dependency files): every commit kept"
    else:
        also = f", {', '.join(rule.also)}" if rule.also else ""
        text = (
            f"{len(rule.inputs)} input files at the two ends; build files, submodules, files added or "
            f"changed beside inputs{also}"
        )
    if how.paths:
        text += f"; restricted to {', '.join(how.paths)}"
    return replace(narrowed, rule=text)
