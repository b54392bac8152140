"""Narrow stage: before the search, drop the commits that cannot change the binary.

Both ends of the range are built first (the endpoint stage needs them anyway, and the stored
builds are reused there); each build records the repository files its targets were compiled
from. When builds are slow (`policy.broken_end_last`, measured on the working end's build) the
broken end is not built: its inputs are scanned (configure, then the preprocessor alone), and
it is tested only if the answer rests on it. A commit between them whose changes touch none of
those inputs, by the conservative rule of `building.inputs`, builds the same binary as its parent
and is skipped as equivalent; so are the commits that touch none of `--paths` when given. A
build command or no build reads no dependency files: every file of the tree is then an input
(`building.inputs`), only commits that change no file are skipped, and `--paths` is the way to
narrow further. The search then runs over the N' commits left, and the report says what each
named commit stands for.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Sequence

from bisectbot.building.inputs import InputRule, narrow
from bisectbot.building.workspace import Workspace
from bisectbot.config import Config
from bisectbot.core import policy
from bisectbot.core.plan import BisectPlan, Narrowing, plan_level
from bisectbot.events import Events, LineNarrowed
from bisectbot.records.commits import BuildRecord
from bisectbot.statistics.outcome import Find


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
    scan: Callable[[str], list[str] | None] | None = None,
) -> BisectPlan:
    """The plan with its line narrowed to the commits that can change the binary; `build`
    builds commits (here, or on a cluster's workers) and gives their records; `scan` (here
    only) gives a commit's inputs without building it, for a broken end tested last."""
    how = plan.narrowing
    if not how.enabled:  # no inputs needed: a broken end tested last only when asked
        plan = replace(plan, broken_last=cfg.test.broken_end == "last" and scan is not None)
    if not how.enabled and not how.paths:
        return plan
    events.check()  # a cancelled job stops before it builds anything
    full = plan.line
    rule: InputRule | None = None
    broken_last = plan.broken_last
    if how.enabled and cfg.build.kind != "cmake":
        rule = InputRule(frozenset(), whole_tree=True)
        broken_last = _broken_last_untold(plan, cfg, build, scan)
    elif how.enabled:
        rule, broken_last = _rule_of_the_ends(plan, cfg, build, scan)
    text = rule_text(rule, how, cfg.build.kind)
    changes = workspace.changes(full[0], full[-1])
    narrowed = replace(narrow(full, changes, rule, how.paths, keep=frozenset(plan.user_skipped)), rule=text)
    events.emit(LineNarrowed(len(narrowed.line), len(full), rule is not None or not how.enabled))
    level = min(cfg.test.alpha, cfg.test.beta, plan_level(len(narrowed.line), cfg.test.confidence, plan.scan))
    return replace(plan, line=narrowed.line, narrowed=narrowed, level=level, broken_last=broken_last)


def _ends(plan: BisectPlan) -> tuple[str, str]:
    """The working end and the broken end of the plan's line."""
    full = plan.line
    return (full[0], full[-1]) if plan.find is Find.BAD else (full[-1], full[0])


def _rule_of_the_ends(
    plan: BisectPlan,
    cfg: Config,
    build: Callable[[Sequence[str]], list[BuildRecord]],
    scan: Callable[[str], list[str] | None] | None,
) -> tuple[InputRule | None, bool]:
    """The inputs of a cmake build at both ends, as a rule (None: unknown at an end), and
    whether the broken end is tested last (then its inputs were scanned, not built)."""
    working, broken = _ends(plan)
    broken_last = plan.broken_last
    if scan is None:  # a cluster builds both at once
        ends = build([working, broken])
        known = [list(b.inputs) for b in ends if b.ok and b.inputs is not None]
    else:
        first = build([working])[0]
        when = cfg.test.broken_end
        last = when == "last" or (when == "auto" and policy.broken_end_last(first.seconds))
        scanned = scan(broken) if first.ok and last else None
        broken_last = scanned is not None
        if not broken_last:
            other = build([broken])[0]
            # stored by a build that did not record them (a search step of an earlier bisect)
            scanned = list(other.inputs) if other.inputs is not None else scan(broken) if other.ok else None
        own = list(first.inputs) if first.inputs is not None else scan(working) if first.ok else None
        known = [list(k) for k in (own, scanned) if k is not None]
    if len(known) != 2:
        return None, broken_last
    return InputRule(frozenset().union(*map(frozenset, known)), (*config_paths(cfg), *plan.narrowing.also)), broken_last


def _broken_last_untold(
    plan: BisectPlan,
    cfg: Config,
    build: Callable[[Sequence[str]], list[BuildRecord]],
    scan: Callable[[str], list[str] | None] | None,
) -> bool:
    """Whether the broken end is tested last where no inputs are read (a build command, no
    build): as for cmake, when asked or when the working end's build was slow; here only (a
    cluster builds both ends at once)."""
    when = cfg.test.broken_end
    if scan is None or when == "first":
        return False
    if when == "last":
        return True
    first = build([_ends(plan)[0]])[0]
    return first.ok and policy.broken_end_last(first.seconds)


def rule_text(rule: InputRule | None, how: Narrowing, kind: str = "cmake") -> str:
    """How the line was narrowed, in words, for the report."""
    if not how.enabled:
        text = "every commit kept (--all-commits)"
    elif rule is not None and rule.whole_tree:
        text = (
            f"build.kind {kind}: no dependency information, so every file of the tree is an input: "
            "every commit that changes a file kept (--paths restricts the search)"
        )
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
    return text
