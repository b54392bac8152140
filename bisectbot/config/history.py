"""The config's keys over time: what a digest hashes, and the error a removed key meets.

A config's digest names its jobs (`jobs.lifecycle.job_id`: a killed bisect resumes under the
same job id) and is shown in reports, so a config keeps its digest from version to version, by
one rule: a key added to a section after digests were first stored is left out of the dump while
it has the value that means "as before" (`ADDED`), and a key removed is put back with the value
every config had (`REMOVED`). Only a config that sets a new key gets a new digest, as it asks for
something new. The rule is for good: dropping a row would change the digest of every config that
leaves its key unset, and a job started before would start over under a new id (its builds and
runs, keyed apart from the digest, still reused). tests/test_config.py holds the digests 0.1.0
computed for the shipped configs.
"""

from __future__ import annotations

from typing import Any

from bisectbot.config.sections import MAX_CATEGORIES, MODEL_RUNS, PARSE_ADDED, SEARCH_RUNS, VARIANT_ADDED

# Where a parse section is: the config's own, each command variant's, each arm's and its variants'.
_PARSES = ("parse", "run.variants[].parse", "arms.*.parse", "arms.*.serve_variants[].parse")

# (where, {key: the value at which it is left out}), in the order the keys were added. `x[]` is
# every item of the list x, `*` every value of a mapping.
ADDED: tuple[tuple[str, dict[str, Any]], ...] = (
    # 2026-12-01: build and command variants (39663b4, ef3f778), the test's budgets (8c854a4)
    ("build", {"variants": None}),
    ("run.variants[]", {"parse": None, "help_lacks": []}),
    ("arms.*", {"build_variants": None, "serve_variants": None, "help_args": None}),
    ("arms.*.serve_variants[]", {"parse": None, "help_lacks": []}),
    ("test", {"eta": None, "model_runs": MODEL_RUNS, "search_runs": SEARCH_RUNS}),
    # 2026-12-03: the generator (issue 24), the run jail and run files (issue 25), the broken end
    # tested last (issue 20)
    ("build", {"generator": "auto"}),
    ("run", {"max_output_mb": 16, "inputs": None}),
    ("test", {"broken_end": "auto"}),
    # 2026-12-04: builds that see no git repository, cut output read (issue 26); 2026-12-06:
    # output formats told by behaviour (parse.stream, extract, fullmatch), the confirmation's
    # budget, crash rates as an outcome, llama-server as the program under test (issue 45);
    # 2026-12-07: parse.json_field, an outcome read from JSON output (issue 48, in PARSE_ADDED)
    ("build", {"hide_git": False}),
    *((where, PARSE_ADDED) for where in _PARSES),
    ("test", {"retest_runs": None}),
    ("statistic", {"failures": "skip"}),
    ("run", {"serve": None}),
    # 2026-12-08: build kinds, a build command and no build (issue 48)
    ("build", {"kind": "cmake", "command": None, "incremental": False}),
    ("build.variants[]", VARIANT_ADDED),
    ("arms.*.build_variants[]", VARIANT_ADDED),
    # 2026-12-08: numbers and timings as statistics (issue 53)
    ("statistic", {"kind": "categorical", "bounds": None, "warmup": 2}),
    ("reference", {"mean": None}),
    ("test", {"relative": False}),
    # 2026-12-08: a reference's tail pooled past this many outcomes (issue 53)
    ("statistic", {"max_categories": MAX_CATEGORIES}),
)

# (where, {key: the value every config had}, the version that removed them, why, what to do):
# docs/upgrading.md has an entry for each.
REMOVED: tuple[tuple[str, dict[str, Any], str, str, str], ...] = (
    # unused since 2026-12-04 (f92ccea): each tested run is paired with the control's run on its seed
    ("reference.control", {"delta": None, "ratio": None}, "0.2.0", "it had no effect", "delete it"),
)


def digest_data(data: dict[str, Any]) -> dict[str, Any]:
    """A config dump (`Config.model_dump(mode="json")`, whole or in part) as digests hash it:
    spelled as when digests were first stored. Changes `data` in place and returns it."""
    for where, defaults in ADDED:
        for section in _sections(data, where):
            for key, default in defaults.items():
                if key in section and section[key] == default:
                    del section[key]
    for where, values, *_ in REMOVED:
        for section in _sections(data, where):
            for key, value in values.items():
                section.setdefault(key, value)
    return data


def removed_key(loc: tuple[Any, ...]) -> str | None:
    """What to tell a config that sets a removed key at `loc` (a pydantic error location), in
    one line; None if that key was not removed."""
    where = ".".join("[]" if isinstance(part, int) else str(part) for part in loc[:-1]).replace(".[]", "[]")
    for place, values, version, why, todo in REMOVED:
        if loc and loc[-1] in values and _matches(where, place):
            return f"removed in bisectbot {version} ({why}): {todo} (see docs/upgrading.md)"
    return None


def _matches(where: str, pattern: str) -> bool:
    parts, wanted = where.split("."), pattern.split(".")
    return len(parts) == len(wanted) and all(w == "*" or w == p for p, w in zip(parts, wanted))


def _sections(node: Any, where: str) -> list[dict[str, Any]]:
    """The mappings at `where` in a dump (a section missing or null: none)."""
    found = [node]
    for step in where.split("."):
        name, each = (step[:-2], True) if step.endswith("[]") else (step, False)
        found = [v for f in found if isinstance(f, dict) for v in (f.values() if name == "*" else [f.get(name)])]
        if each:
            found = [item for f in found if isinstance(f, list) for item in f]
    return [f for f in found if isinstance(f, dict)]
