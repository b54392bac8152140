"""The cases of `bench_stats.py` and how their results are judged: the distributions, the
histories (with llama.cpp's share of commits that cannot change the binary), the tasks the Dask
workers run, what counts as a wrong answer, and the tables with 95% Clopper–Pearson bounds.

Kept apart from the runner so that the workers (and a `--baseline` child running an older
bisectbot) import only this and the simulators, never the command line.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy.stats import beta as beta_dist

from bench import simbisect as sb
from bench import simulate as sim

ALPHA = 5e-4
TOL = 0.1
ETA = 0.3 * TOL  # the default indifference (StatTestConfig)
P_COND = list(sb.P_29975.values())


# -- distributions ----------------------------------------------------------------------------
def shifted(tv: float, along: float | None = None) -> np.ndarray:
    """The conditional distribution at TV `tv` from the reference in the hardest direction (the
    direction of the TV `along` shift when given, so two defects push the same way)."""
    p = np.asarray(P_COND)
    if along is None:
        return np.asarray(sim.hardest_tv_shift(P_COND, tv))
    step = np.asarray(sim.hardest_tv_shift(P_COND, along)) - p
    return p + step * (tv / along)


GROSS = np.array([1.0, 0.0, 0.0])  # #29975: after `f`, always `e`


# -- bounds -----------------------------------------------------------------------------------
def upper95(k: int, n: int) -> float:
    return 1.0 if k >= n else float(beta_dist.ppf(0.95, k + 1, n - k))


def lower95(k: int, n: int) -> float:
    return 0.0 if k <= 0 else float(beta_dist.ppf(0.05, k, n - k + 1))


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def rate_up(k: int, n: int) -> str:
    return f"{pct(k / n)} ({k}/{n}; ≤ {pct(upper95(k, n))})"


def rate_down(k: int, n: int) -> str:
    return f"{pct(k / n)} ({k}/{n}; ≥ {pct(lower95(k, n))})"


# -- tasks (run on the Dask workers) -----------------------------------------------------------
def verdict_task(
    name: str, cond: list[float], other: float, eta: float, paths: int, budget: int, seed: int
) -> dict[str, Any]:
    """`paths` sequential verdicts at one commit (the generic test, as an endpoint or re-test)."""
    ref = sim.ref_29975()
    q = sim.joint(cond, other=other)
    o = sim.simulate_generic(
        np.random.default_rng(seed),
        ref,
        q,
        alpha=ALPHA,
        beta=ALPHA,
        tolerance=TOL,
        max_runs=budget,
        paths=paths,
        eta=eta,
    )
    bad = o.runs[o.decision == sim.BAD]
    return {
        "name": name,
        "paths": paths,
        "bad": int((o.decision == sim.BAD).sum()),
        "good": int((o.decision == sim.GOOD).sum()),
        "bad_runs": bad.tolist(),
    }


def history(case: dict[str, Any], rep: int) -> tuple[sb.History, list[int]]:
    """The case's history for one repetition (fixed by its number): a share of the commits
    cannot change the binary (llama.cpp's mix, `EQUIVALENT`), the change points at random
    commits that can (or, with `at`, at the first that can from each share of the line on);
    and the positions where something changed. A shift is the conditional outcome distribution
    from its change point on; `conditions` gives P(condition) from the start and from each
    change point on (default #29975's 0.82), `failing_at` the share of runs that crash."""
    rng = np.random.default_rng([case["seed"], rep])
    n, shifts = case["n"], case["shifts"]
    inner = np.arange(1, n - 1)
    equivalent = frozenset(int(p) for p in inner[rng.random(inner.size) < case.get("equivalent", EQUIVALENT)])
    can = [p for p in range(1, n) if p not in equivalent]
    if "at" in case:
        where = [next(p for p in can if p >= round(f * (n - 1))) for f in case["at"]]
    else:
        where = sorted(int(p) for p in rng.choice(can, size=len(shifts), replace=False))
    conditions = case.get("conditions") or [sb.CONDITION_29975] * (len(shifts) + 1)
    changes = {0: sb.joint(P_COND, case["other"], conditions[0])}
    for pos, cond, c in zip(where, shifts, conditions[1:]):
        changes[pos] = sb.joint(cond, case["other"], c)
    failing_at = dict(zip([0, *where], case["failing_at"])) if "failing_at" in case else None
    return sb.History(
        n,
        changes,
        salt=case["seed"] * 1_000_003 + rep,
        equivalent=equivalent,
        failing=case.get("failing", 0.0),
        failing_at=failing_at,
    ), where


def bisect_task(
    case: dict[str, Any], reps: list[int], max_runs: int | None, costs: str = "llama", strategy: str = "auto"
) -> list[dict[str, Any]]:
    """Bisects of the case's histories through run_bisect; what each named and cost (seconds at
    both cost settings)."""
    import bisectbot

    cfg = sb.sim_config(max_runs, **case.get("config", {}))
    out = []
    for rep in reps:
        hist, where = history(case, rep)
        t0 = time.perf_counter()
        checks: dict[str, Any] = {}
        if case.get("shape"):  # issue 45's shapes: what the report says is judged too
            o, checks = shape_run(case, cfg, hist, where, strategy, costs)
        else:
            o = sb.run_one(cfg, hist, strategy, costs=costs)
        out.append(
            {
                **asdict(o),
                **({"checks": checks} if checks else {}),
                "rep": rep,
                "where": where,
                "seconds": time.perf_counter() - t0,
                "llama_s": o.seconds("llama"),
                "demo_s": o.seconds("demo"),
                "costs": costs,
                "code": str(Path(bisectbot.__file__).parent),
            }
        )
    return out


# -- what a shape's report must say (issue 45) ----------------------------------------------------
CONDITION_CHANGED = "the share of runs meeting the condition changed"
ZONE_BLAME = ("may sit between eta", "between eta and tolerance from the reference may be named", "undecided: a commit")


def flat(text: str) -> str:
    """A rendered summary as one line of words (the terminal's wraps and shell continuations undone)."""
    return " ".join(text.replace(" \\\n", " ").split())


def shape_run(
    case: dict[str, Any], cfg: Any, hist: sb.History, where: list[int], strategy: str, costs: str
) -> tuple[Any, dict[str, Any]]:
    """One bisect of a shape's history, as `run_one` gives it, and the checks of what its report
    (or endpoint error) says (`shape_checks`)."""
    from bisectbot.errors import EndpointError

    try:
        report = sb.run_report(cfg, hist, strategy, costs)
    except EndpointError as exc:
        o = sb.Outcome("endpoint-error", None, 0.0, 0, 0, strategy, str(exc)[:200], int(sb._broken_last(costs)))
        return o, shape_checks(case, cfg, hist, where, None, str(exc), costs)
    return sb.outcome_of(report, hist, costs), shape_checks(case, cfg, hist, where, report, "", costs)


def shape_checks(
    case: dict[str, Any],
    cfg: Any,
    hist: sb.History,
    where: list[int],
    report: Any,
    error: str,
    costs: str,
) -> dict[str, Any]:
    """Does the report say the right thing for the case's shape? Read in its terminal summary and
    its Markdown alike (every check must hold in both)."""
    from bisectbot.report.markdown import bisect_markdown, bound_text
    from bisectbot.report.text import bisect_text

    shape = case["shape"]
    out: dict[str, Any] = {"endpoint_error": bool(error)}
    plain = lambda md: flat(md).replace("**", "").replace("`", "")  # noqa: E731 - Markdown read as words
    texts = [error] if report is None else [flat(bisect_text(report, width=10_000)), plain(bisect_markdown(report))]
    said = lambda phrase: all(phrase in t for t in texts)  # noqa: E731
    named = hist.shas.index(report.first_bad) if report is not None and report.first_bad else None
    found = report is not None and report.status.value == "found"
    if found:
        sha = report.first_bad[:12]
        out["proved"] = said(f"Proved: a GOOD→BAD change at {sha}")
        if report.proved["first_departure"]:
            out["hidden"] = said("It is the first departure")
        else:
            out["hidden"] = said("Not proved: that it is the first departure.") and said(report.scan_command)
    if shape == "reintroduced" and found and named == where[2]:
        # the hidden first departure: a stretch names it, the command covers it, and scanning finds it
        pos = [(hist.shas.index(s["after"]), hist.shas.index(s["before"]), s) for s in report.untested_before]
        hiding = [s for a, b, s in pos if a < where[0] < b]
        out["stretch"] = bool(hiding) and said(f"{hiding[0]['first'][:12]}..{hiding[0]['last'][:12]}")
        words = report.scan_command.split()
        good, bad = (hist.shas.index(words[words.index(flag) + 1]) for flag in ("--good", "--bad"))
        out["command"] = good < where[0] and where[1] <= bad < where[2]
        scanned = sb.run_report(cfg, hist, "auto", costs, good=good, bad=bad, scan=True)
        out["scan_named"] = hist.shas.index(scanned.first_bad) if scanned.first_bad else None
        out["scan_builds"], out["scan_runs"] = scanned.builds, scanned.runs
        out["scan_confidence"] = scanned.confidence
    if shape == "condition":
        out["condition_named"] = said(f"{CONDITION_CHANGED}: ")
        out["zone_blamed"] = any(any(blame in t for t in texts) for blame in ZONE_BLAME)
        if report is not None and report.builds > report.builds_bound:
            why = bound_text(report)
            out["over_bound"] = True
            # in both summaries (the Markdown writes the bound's number apart), and a cause, not a count alone
            told = why.removeprefix(f"bound {report.builds_bound}, ")
            out["bound_explained"] = told.startswith("exceeded by") and said(told) and not told.endswith(" commits")
    if found or shape == "condition":
        out["wording"] = all(
            v
            for k, v in out.items()
            if k in ("proved", "hidden", "stretch", "command", "condition_named", "bound_explained")
        ) and not out.get("zone_blamed", False)
    return out


# -- cases ------------------------------------------------------------------------------------
EQUIVALENT = 0.55  # share of llama.cpp's first-parent commits that cannot change llama-speculative


def cond_tv(cond: Sequence[float], other: float) -> float:
    """Total variation of a conditional outcome distribution (with a stray share) from the reference's."""
    q = np.append(np.asarray(cond, float) * (1 - other), other)
    return 0.5 * float(np.abs(q - np.append(P_COND, 0.0)).sum())


def bisect_cases(scale: float) -> list[dict[str, Any]]:
    """The histories: every change below eta or beyond tolerance (`zone` False: the first
    departure must be named), and three shapes with something inside the indifference zone."""

    def reps(n: int) -> int:
        return max(10, int(n * scale))

    tv15, tv30 = shifted(0.15), shifted(0.30, along=0.15)
    two = [
        ("two defects: TV 0.15 then gross", [tv15, GROSS]),
        ("two defects: TV 0.15 then TV 0.30 (same way)", [tv15, tv30]),
    ]
    cases = []
    for i, (label, shifts) in enumerate(two):
        for n in (64, 1024):
            cases.append(
                {
                    "label": f"{label}, N = {n}",
                    "n": n,
                    "shifts": [s.tolist() for s in shifts],
                    "other": 0.0,
                    "reps": reps(300),
                    "seed": 100 + 10 * i + (n > 64),
                }
            )
    for j, (label, shift) in enumerate((("gross", GROSS), ("TV 0.15", tv15))):
        cases.append(
            {
                "label": f"2% stray outcome on every commit, one {label} defect, N = 1024",
                "n": 1024,
                "shifts": [shift.tolist()],
                "other": 0.02,
                "reps": reps(300),
                "seed": 200 + j,
            }
        )
    cases.append(
        {
            "label": "one TV 0.1 defect (hardest direction), N = 4096",
            "n": 4096,
            "shifts": [shifted(0.1).tolist()],
            "other": 0.0,
            "reps": reps(300),
            "seed": 300,
        }
    )
    cases.append(
        {
            "label": "10% of runs fail, one TV 0.15 defect, N = 256",
            "n": 256,
            "shifts": [tv15.tolist()],
            "other": 0.0,
            "failing": 0.10,
            "reps": reps(300),
            "seed": 400,
        }
    )
    # inside the indifference zone (eta 0.03 … tolerance 0.1): either verdict is allowed there
    cases.append(
        {
            "label": "three change points: TV 0.06, TV 0.12, gross, N = 256",
            "n": 256,
            "shifts": [shifted(0.06).tolist(), shifted(0.12, along=0.06).tolist(), GROSS.tolist()],
            "other": 0.0,
            "reps": reps(300),
            "seed": 500,
        }
    )
    cases.append(
        {
            "label": "5% stray outcome on every commit, one TV 0.15 defect, N = 256",
            "n": 256,
            "shifts": [tv15.tolist()],
            "other": 0.05,
            "reps": reps(300),
            "seed": 600,
        }
    )
    for case in cases:
        case["tvs"] = [cond_tv(c, case["other"]) for c in case["shifts"]]
        case["base_tv"] = cond_tv(P_COND, case["other"])
        case["zone"] = any(ETA < tv < TOL for tv in [case["base_tv"], *case["tvs"]])
    return cases + shape_cases(scale)


def shape_cases(scale: float) -> list[dict[str, Any]]:
    """Issue 45's shapes, each with what its report must say (`shape`, judged by `shape_checks`):
    a defect fixed and re-introduced (named at the re-introduction, the report must say it
    proved a GOOD→BAD change there and where an earlier departure could hide, with the command
    that scans those commits), a crash rate rising 0 → 30% (the config counts failed runs as an
    outcome: found like any defect), and a change in how often the condition is met that the
    reference cannot see (no condition_prob: nothing named, the change named instead)."""
    reps = max(10, int(300 * scale))
    common = {"n": 256, "other": 0.0, "reps": reps, "zone": False, "base_tv": 0.0}
    return [
        {
            **common,
            "label": "re-introduced: gross at 30%, fixed at 50%, back at 80%, N = 256",
            "shifts": [GROSS.tolist(), list(P_COND), GROSS.tolist()],
            "at": [0.3, 0.5, 0.8],
            "tvs": [cond_tv(GROSS, 0.0), 0.0, cond_tv(GROSS, 0.0)],
            "seed": 700,
            "shape": "reintroduced",
        },
        {
            **common,
            "label": "crash rate 0 → 30% at one commit (statistic.failures: outcome), N = 256",
            "shifts": [list(P_COND)],
            "failing_at": [0.0, 0.3],
            "config": {"failures": "outcome"},
            "tvs": [0.3],  # the share of runs that fail: FAILED's reference probability is 0
            "seed": 800,
            "shape": "crash",
        },
        {
            **common,
            "label": "condition rate 0.5 → 0.1, outcome unchanged (no condition_prob), N = 256",
            "shifts": [list(P_COND)],
            "conditions": [0.5, 0.1],
            "config": {"condition_prob": False},
            "tvs": [0.0],  # what the reference's tests can see: nothing changed, nothing may be named
            "seed": 900,
            "shape": "condition",
        },
    ]


def wrong(case: dict[str, Any], named: int | None, where: list[int]) -> bool:
    """The issue's definition: a commit where nothing changed, a commit after the first change
    beyond the tolerance, or a commit whose own distribution is within eta of the reference
    (nothing named, or an ambiguous range, is not wrong)."""
    if named is None:
        return False
    if named not in where:
        return True
    j = where.index(named)
    return any(tv >= TOL - 1e-9 for tv in case["tvs"][:j]) or case["tvs"][j] <= ETA


def summarise(case: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    first = sum(r["named"] == r["where"][0] for r in results)
    later = sum(r["named"] is not None and r["named"] in r["where"][1:] for r in results)
    nothing = sum(r["named"] is not None and r["named"] not in r["where"] for r in results)
    unnamed = sum(r["named"] is None for r in results)
    named = [r for r in results if r["named"] is not None]
    bad = [r for r in results if wrong(case, r["named"], r["where"])]
    confident_wrong = sum(r["confidence"] >= 0.99 for r in bad)
    conf = min((r["confidence"] for r in named), default=1.0)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {
        "label": case["label"],
        "n": n,
        "first": first,
        "later": later,
        "nothing": nothing,
        "unnamed": unnamed,
        "wrong": len(bad),
        "confident_wrong": confident_wrong,
        "min_conf": conf,
        "zone": case.get("zone", False),
        "mean_conf": float(np.mean([r["confidence"] for r in named])) if named else 0.0,
        "runs": float(np.mean([r["runs"] for r in results])),
        "builds": float(np.mean([r["builds"] for r in results])),
        "cost": float(np.mean([r["runs"] + sb.BUILD_COST * r["builds"] for r in results])),
        "llama_s": float(np.mean([r.get("llama_s", 0.0) for r in results])),
        "demo_s": float(np.mean([r.get("demo_s", 0.0) for r in results])),
        "seconds": float(np.mean([r["seconds"] for r in results])),
        "statuses": statuses,
        "strategies": sorted({r["strategy"] for r in results}),
    }


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def bisect_table(summaries: list[dict[str, Any]], setting: str) -> str:
    rows = []
    for s in summaries:
        rows.append(
            (
                s["label"] + (" [zone]" if s["zone"] else ""),
                rate_down(s["first"], s["n"]),
                rate_up(s["confident_wrong"], s["n"]),
                rate_up(s["wrong"], s["n"]),
                rate_up(s["unnamed"], s["n"]),
                f"{s['min_conf']:.4f}",
                f"{s['runs']:,.0f} / {s['builds']:.1f}",
                f"{s[setting + '_s']:,.0f} s",
                ",".join(s["strategies"]),
            )
        )
    return table(
        (
            "history",
            "first departure named",
            "wrong, stated confidence ≥ 0.99",
            "wrong (any)",
            "nothing named",
            "min stated confidence",
            "mean runs / builds",
            f"mean wall ({setting} costs)",
            "strategy",
        ),
        rows,
    )


def shape_summary(case: dict[str, Any], results: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """What a shape's bisects said, as lines to print, and what fails its acceptance (issue 45)."""
    n, shape = len(results), case["shape"]
    checks = [r.get("checks", {}) for r in results]
    lines, fails = [], []
    named = [r["named"] for r in results]
    where = [r["where"] for r in results]
    worded = [c for c in checks if "wording" in c]
    right = sum(bool(c["wording"]) for c in worded)
    lines.append(f"report's wording right: {rate_down(right, len(worded)) if worded else 'no report to judge'}")
    if right < len(worded):
        fails.append(f"the wording is wrong in {len(worded) - right} of {len(worded)} reports")
    if shape == "reintroduced":
        first = sum(p == w[0] for p, w in zip(named, where))
        again = [c for p, w, c in zip(named, where, checks) if p == w[2]]
        other = sum(p is not None and p not in (w[0], w[2]) for p, w in zip(named, where))
        scans = sum(c.get("scan_named") == w[0] for p, w, c in zip(named, where, checks) if p == w[2])
        scan_wrong = sum(
            c.get("scan_named") not in (None, w[0]) for p, w, c in zip(named, where, checks) if p == w[2]
        )  # a scan that names nothing (a test out of budget) is not wrong; one that names another commit is
        lines.append(f"first departure (30%) named: {rate_down(first, n)}")
        lines.append(f"re-introduction (80%) named: {rate_up(len(again), n)}")
        if again:
            said = sum(
                bool(c.get("proved") and c.get("hidden") and c.get("stretch") and c.get("command")) for c in again
            )
            builds = np.mean([c["scan_builds"] for c in again])
            runs = np.mean([c["scan_runs"] for c in again])
            lines.append(
                f"  of those, the report says it proved a GOOD→BAD change there and names the untested stretch "
                f"hiding the first departure with a --scan command over it: {rate_down(said, len(again))}; that "
                f"command (run) names the first departure: {rate_down(scans, len(again))}, "
                f"{builds:.1f} builds and {runs:,.0f} runs on average"
            )
            if said < len(again):
                fails.append(f"{len(again) - said} re-introduction reports do not say what they proved")
            if scans < 0.95 * len(again) or scan_wrong:
                fails.append(
                    f"the --scan command named the first departure in {scans} of {len(again)} ({scan_wrong} other "
                    f"commits named)"
                )
        if other:
            fails.append(f"{other} bisects named a commit where nothing became BAD")
    elif shape == "crash":
        first = sum(p == w[0] and r["status"] == "found" for p, w, r in zip(named, where, results))
        wrong = sum(p is not None and p != w[0] for p, w in zip(named, where))
        lines.append(f"crash-rate change named and confirmed: {rate_down(first, n)}")
        if first < 0.9 * n or wrong:
            fails.append(f"the crash-rate change was named in {first} of {n} ({wrong} other commits named)")
    elif shape == "condition":
        nothing = sum(p is None for p in named)
        told = sum(bool(c.get("condition_named")) for c in checks)
        blamed = sum(bool(c.get("zone_blamed")) for c in checks)
        over = [c for c in checks if c.get("over_bound")]
        explained = sum(bool(c.get("bound_explained")) for c in over)
        lines.append(f"nothing named: {rate_down(nothing, n)}")
        lines.append(f"named a condition-rate change (the share of runs meeting the condition): {rate_down(told, n)}")
        lines.append(f"blamed the indifference zone: {rate_up(blamed, n)}")
        lines.append(
            f"builds over the stated bound: {rate_up(len(over), n)}"
            + (f", the report saying which step needed them in {explained} of {len(over)}" if over else "")
        )
        if nothing < n:
            fails.append(f"{n - nothing} bisects named a commit")
        if told < n or blamed:
            fails.append(f"the condition-rate change was named in {told} of {n}, the zone blamed in {blamed}")
        if explained < len(over):
            fails.append(f"{len(over) - explained} reports passed the builds bound without saying why")
    return lines, fails
