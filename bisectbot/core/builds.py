"""Where a bisect's builds went (pure): each stage's builds, and why a bisect built more than
its bound says.

A report states a bound on its builds (⌈log2 N⌉ + 3: the two ends, one build per halving of the
N searched commits, one for a culprit's parent skipped as equivalent) and how many it made. A
bisect that builds more must say where the extra builds went — a commit that could not be built
or run, a confirmation that sent the search on above the commit it named or back below its
parent, a parent skipped as equivalent that the confirmation built — never just the number. The
verdicts say it all: each commit is built once, at its first main-arm verdict, and the role of
that verdict is the stage that needed it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import BuildStageRow
from bisectbot.statistics.outcome import Find, Verdict

ENDS = "ends"
SEARCH = "search"
CONFIRMATION = "confirmation"
ZONE_CHECK = "zone-check"


def stage_of(role: str) -> str:
    """The stage a verdict's role belongs to."""
    if role.endswith("-endpoint") or role.endswith("-model"):
        return ENDS
    if role.startswith("retest-") or role.startswith("confirm-"):
        return CONFIRMATION
    if role == ZONE_CHECK:
        return ZONE_CHECK
    return SEARCH  # step, probe, sticky


@dataclass(frozen=True)
class BuildStage:
    """The commits one stage built first (in the order it built them): the ends; each search
    (`search` 1, 2, … : a confirmation that did not hold sends the search on); each
    confirmation; `why` says what sent a search after the first on, `skipped` how many of its
    builds could not be built or run."""

    stage: str
    number: int  # 1, 2, … within its kind
    commits: tuple[str, ...]
    skipped: int = 0
    why: str = ""

    @property
    def builds(self) -> int:
        return len(self.commits)

    def to_json(self) -> BuildStageRow:
        return BuildStageRow(
            stage=self.stage,
            number=self.number,
            commits=list(self.commits),
            skipped=self.skipped,
            why=self.why,
            builds=self.builds,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "BuildStage":
        return cls(
            str(data["stage"]),
            int(data["number"]),
            tuple(data.get("commits", ())),
            int(data.get("skipped", 0)),
            str(data.get("why", "")),
        )


def _confirmation_outcome(verdicts: Sequence[CommitVerdict], find: Find) -> str:
    """What one confirmation's verdicts (in order) say that sends the search on: the named
    commit holding as its parent should (the search goes on above it), or the parent departing
    (it walks back below it); "" otherwise."""
    for v in verdicts:
        if v.role == "retest-culprit" and v.verdict is find.parent_verdict:
            return (
                f"{v.sha[:12]}, where the search before ended, tested {v.verdict.value.upper()} on fresh seeds, not "
                f"{find.culprit_verdict.value.upper()}: it went on above it"
            )
        if v.role == "retest-parent" and v.verdict is find.culprit_verdict:
            return (
                f"the parent {v.sha[:12]} of the commit the search before ended at tested "
                f"{v.verdict.value.upper()} on fresh seeds: it walked back below it"
            )
    return ""


def build_stages(verdicts: Sequence[CommitVerdict], find: Find = Find.BAD) -> list[BuildStage]:
    """The bisect's builds by stage, in the order the stages began (see `BuildStage`). A search
    interrupted by an end's test (a broken end tested last, a model measured) goes on as the
    same search; only a confirmation sends the next one."""
    order: list[tuple[str, int]] = []
    made: dict[tuple[str, int], BuildStage] = {}
    seen: set[str] = set()
    counts: dict[str, int] = {}
    last: tuple[str, int] | None = None
    confirming: list[CommitVerdict] = []
    searches, after_confirmation = 0, True
    for v in verdicts:
        if v.arm != "main":
            continue
        stage = stage_of(v.role)
        if last is None or last[0] != stage:
            why = ""
            if last is not None and last[0] == CONFIRMATION:
                why = _confirmation_outcome(confirming, find)
                confirming, after_confirmation = [], True
            if stage == SEARCH:
                if after_confirmation:
                    searches, after_confirmation = searches + 1, False
                    key = (SEARCH, searches)
                    made[key] = BuildStage(SEARCH, searches, (), 0, why)
                    order.append(key)
                last = (SEARCH, searches)
            else:
                counts[stage] = counts.get(stage, 0) + 1
                last = (stage, counts[stage])
                made[last] = BuildStage(stage, counts[stage], ())
                order.append(last)
        if stage == CONFIRMATION:
            confirming.append(v)
        if v.sha not in seen:
            seen.add(v.sha)
            record = made[last]
            made[last] = replace(
                record, commits=(*record.commits, v.sha), skipped=record.skipped + (v.verdict is Verdict.SKIP)
            )
    stages = [made[key] for key in order]
    # a stage that built nothing says nothing about where the builds went (a later search does: why it ran)
    return [s for s in stages if s.builds or (s.stage == SEARCH and s.number > 1)]


def builds_bound(searched: int) -> int:
    """⌈log2 N⌉ + 3 for N searched commits: the ends, a halving per build, a skipped parent."""
    return math.ceil(math.log2(searched)) + 3


def over_bound(stages: Sequence[BuildStage], bound: int) -> list[str]:
    """Why a bisect built more than `bound` commits, one clause per cause (empty within it)."""
    builds = sum(s.builds for s in stages)
    if builds <= bound:
        return []
    out = []
    skipped = sum(s.skipped for s in stages)
    if skipped:
        out.append(
            f"{skipped} {'commit' if skipped == 1 else 'commits'} that could not be built or run "
            f"(each costs a build and halves nothing)"
        )
    for s in stages:
        if s.stage == SEARCH and s.number > 1:
            what = s.why or "the search went on"
            out.append(f"search {s.number} ({s.builds} {'build' if s.builds == 1 else 'builds'}): {what}")
    confirmations = [s for s in stages if s.stage == CONFIRMATION and s.builds]
    if len(confirmations) > 1 or any(s.builds > 1 for s in confirmations):
        built = sum(s.builds for s in confirmations)
        out.append(
            f"the confirmations built {built} commits the search had skipped as equivalent (a named commit's parent, "
            f"or the commit it was presumed to equal)"
        )
    if not out:  # the first search alone went past ⌈log2 N⌉ (its halvings were uneven)
        first = next((s for s in stages if s.stage == SEARCH), None)
        out.append(f"the search built {first.builds if first else 0} commits")
    return out


def over_bound_text(stages: Sequence[BuildStage], bound: int) -> str:
    """'exceeded by 9: …' or '' within the bound."""
    why = over_bound(stages, bound)
    if not why:
        return ""
    builds = sum(s.builds for s in stages)
    return f"exceeded by {builds - bound}: " + "; ".join(why)
