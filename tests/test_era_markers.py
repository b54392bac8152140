"""Every --help marker of the shipped configs, checked against real llama.cpp trees on both
sides of the change it marks.

A `help_contains` / `help_lacks` text decides which command variant a binary gets; a marker that
appears earlier or later than its comment says picks the wrong variant for every commit in
between (the old `----- common params -----` marker was off by ~80 commits). So each marker is
listed here with the last llama-cpp-python sdist whose tree lacks it and the first whose tree has
it, and the source files that print the help; the test reads those files out of both sdists
(downloaded once into the bisectbot cache, as the end-to-end scripts do) and checks the literal is
absent from the one and present in the other. A marker in a shipped config that is not listed
here fails the test. Output formats are told apart by what binaries print, not by markers
(`parse.fullmatch`; `scripts/llama_eras.py e2e` runs them on both sides of the logging rewrite).
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

from bisectbot.config import load_config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from llama_e2e import fetch_sdist  # noqa: E402

HELP_SOURCES = ("common/arg.cpp", "common/common.cpp")
# marker -> (last sdist without it, first sdist with it): where the text enters --help
MARKERS = {
    "on|off": ("0.3.16", "0.3.17"),  # -fa takes on|off|auto (llama-server's and llama-speculative's)
}


def shipped_markers() -> dict[str, list[str]]:
    """Every help_contains / help_lacks text of the shipped configs → where it is used."""
    found: dict[str, list[str]] = {}
    for path in sorted([*REPO.glob("configs/*.yaml"), *REPO.glob("configs/llama/*.yaml")]):
        cfg = load_config(path)
        groups = [("run.variants", cfg.run.templates)]
        groups += [(f"arms.{name}.serve_variants", arm.serve_choices) for name, arm in cfg.arms.items()]
        for where, variants in groups:
            for i, v in enumerate(variants):
                for text in [*v.help_contains, *v.help_lacks]:
                    found.setdefault(text, []).append(f"{path.relative_to(REPO)}: {where}[{i}]")
    return found


def help_source(version: str) -> str:
    """The help-printing sources of the sdist's llama.cpp tree, read from the tarball."""
    try:
        sdist = fetch_sdist(version)
    except (SystemExit, OSError) as exc:
        pytest.skip(f"cannot fetch the llama-cpp-python {version} sdist: {exc}")
    text = []
    with tarfile.open(sdist) as tar:
        for rel in HELP_SOURCES:
            try:
                member = tar.extractfile(f"llama_cpp_python-{version}/vendor/llama.cpp/{rel}")
            except KeyError:
                continue
            if member is not None:
                text.append(member.read().decode("utf-8", "replace"))
    assert text, f"{version}: none of {HELP_SOURCES} in the sdist"
    return "\n".join(text)


def test_every_marker_of_the_shipped_configs_is_listed_with_its_change() -> None:
    unlisted = {m: where for m, where in shipped_markers().items() if m not in MARKERS}
    assert not unlisted, f"markers with no checked change: {unlisted}"


@pytest.mark.heavy  # downloads two llama-cpp-python sdists per marker (~60 MB each, cached)
@pytest.mark.parametrize("marker", sorted(MARKERS))
def test_a_marker_appears_exactly_where_its_change_is(marker: str) -> None:
    before, after = MARKERS[marker]
    assert marker not in help_source(before), f"{marker!r} is already in {before}'s help sources"
    assert marker in help_source(after), f"{marker!r} is not in {after}'s help sources"
