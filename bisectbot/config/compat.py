"""Compatibility of config digests: keys added to the config after digests were first stored.

A config's digest names its jobs (`jobs.lifecycle`: a killed bisect resumes under the same job id)
and is shown in reports. A key added to a section changes every dump, so every digest, unless the
dump leaves it out while it is not set. Each item below says what it keeps working, since when,
and when it can go: dropping an item changes the digest of every config that leaves its key
unset, so a job started before the drop starts over as a new job instead of resuming (its stored
builds and runs, keyed apart from the digest, are still reused).
"""

from __future__ import annotations

from typing import Any

from bisectbot.config.sections import MODEL_RUNS, SEARCH_RUNS


def without_unset_additions(data: dict[str, Any]) -> dict[str, Any]:
    """A config dump (`Config.model_dump`) without the keys added after digests were first
    stored, when they are not set: a config that does not use them keeps its digest (and so its
    job ids). Changes `data` in place and returns it."""
    _test_budgets(data)
    _build_variants(data)
    _build_generator(data)
    _run_jail_keys(data)
    _run_variant_keys(data)
    _arm_keys(data)
    _parse_defaults(data)
    _statistic_failures(data)
    _run_serve(data)
    return data


def _run_serve(data: dict[str, Any]) -> None:
    """run.serve unset. Added 2026-12-06 (issue 45, llama-server as the program under test).
    Can go once no state directory holds an unfinished job from before then."""
    run = data.get("run") or {}
    if "serve" in run and run["serve"] is None:
        run.pop("serve")


def _statistic_failures(data: dict[str, Any]) -> None:
    """statistic.failures at its default (skip). Added 2026-12-06 (issue 45, crash rates as an
    outcome). Can go once no state directory holds an unfinished job from before then."""
    statistic = data.get("statistic") or {}
    if statistic.get("failures") == "skip":
        statistic.pop("failures")


def _parse_defaults(data: dict[str, Any]) -> None:
    """parse.cut_output (and the keys after it) at their defaults, in `parse` and in every run and arm variant's.
    Added 2026-12-04 (issue 26). Can go once no state directory holds an unfinished job from
    before then."""
    parses = [data.get("parse")]
    parses += [v.get("parse") for v in (data.get("run") or {}).get("variants") or []]
    for arm in (data.get("arms") or {}).values():
        parses.append(arm.get("parse"))
        parses += [v.get("parse") for v in arm.get("serve_variants") or []]
    # stream, extract, fullmatch: added 2026-12-06 (issue 45, output formats told by behaviour)
    defaults = {"cut_output": "rerun", "stream": "stdout", "extract": None, "fullmatch": None}
    for parse in parses:
        if isinstance(parse, dict):
            for key, default in defaults.items():
                if key in parse and parse[key] == default:
                    parse.pop(key)


def _test_budgets(data: dict[str, Any]) -> None:
    """test.eta, test.model_runs, test.search_runs at their defaults. Added 2026-12-01 (8c854a4).
    Can go once no state directory holds an unfinished job from before then."""
    test = data.get("test") or {}
    # broken_end: added 2026-12-03 (issue 20, the broken end tested last)
    for key, default in (
        ("eta", None),
        ("model_runs", MODEL_RUNS),
        ("search_runs", SEARCH_RUNS),
        ("broken_end", "auto"),
        # retest_runs: added 2026-12-06 (issue 45, the confirmation's budget as a knob)
        ("retest_runs", None),
    ):
        if key in test and test[key] == default:
            test.pop(key)


def _build_generator(data: dict[str, Any]) -> None:
    """build.generator at its default (auto; added 2026-12-03, issue 24) and build.hide_git at
    its (false; added 2026-12-04, issue 26). Can go once no state directory holds an unfinished
    job from before then."""
    build = data.get("build") or {}
    if build.get("generator") == "auto":
        build.pop("generator")
    if build.get("hide_git") is False:
        build.pop("hide_git")


def _run_jail_keys(data: dict[str, Any]) -> None:
    """run.max_output_mb at its default (16) and run.inputs unset. Added 2026-12-03 (issue 25,
    the run jail and run files). Can go once no state directory holds an unfinished job from
    before then."""
    run = data.get("run") or {}
    if run.get("max_output_mb") == 16:
        run.pop("max_output_mb")
    if run.get("inputs", "unset") is None:
        run.pop("inputs")


def _build_variants(data: dict[str, Any]) -> None:
    """build.variants unset. Added 2026-12-01 (39663b4, build variants). Can go once no state
    directory holds an unfinished job from before then."""
    build = data.get("build") or {}
    if build.get("variants") is None:
        build.pop("variants", None)


def _run_variant_keys(data: dict[str, Any]) -> None:
    """run.variants[].parse unset (39663b4) and run.variants[].help_lacks empty (ef3f778), both
    added 2026-12-01. Can go once no state directory holds an unfinished job from before then."""
    for variant in (data.get("run") or {}).get("variants") or []:
        if variant.get("parse") is None:
            variant.pop("parse", None)
        if not variant.get("help_lacks"):
            variant.pop("help_lacks", None)


def _arm_keys(data: dict[str, Any]) -> None:
    """arms.<name>.build_variants, serve_variants, help_args unset (39663b4), and their
    serve_variants[].parse unset and help_lacks empty (39663b4, ef3f778), all added 2026-12-01.
    Can go once no state directory holds an unfinished job from before then."""
    for arm in (data.get("arms") or {}).values():
        for key in ("build_variants", "serve_variants", "help_args"):
            if arm.get(key) is None:
                arm.pop(key, None)
        for variant in arm.get("serve_variants") or []:
            if variant.get("parse") is None:
                variant.pop("parse", None)
            if not variant.get("help_lacks"):
                variant.pop("help_lacks", None)
