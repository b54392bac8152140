"""bench/bench_build.py's readers of a build: the target per era, the compile/link split."""

from __future__ import annotations

from pathlib import Path

from bench import bench_build as bb


def test_the_era_decides_the_target_and_options(tmp_path: Path) -> None:
    old = tmp_path / "old"
    (old / "examples" / "speculative").mkdir(parents=True)
    (old / "examples" / "speculative" / "CMakeLists.txt").write_text("set(TARGET speculative)\n")
    assert bb.era_options(old) == ("speculative", ["-DLLAMA_NATIVE=OFF", "-DLLAMA_CCACHE=OFF"])
    renamed = tmp_path / "renamed"
    (renamed / "examples" / "speculative").mkdir(parents=True)
    (renamed / "examples" / "speculative" / "CMakeLists.txt").write_text("set(TARGET llama-speculative)\n")
    assert bb.era_options(renamed)[0] == "llama-speculative"
    split = tmp_path / "split"
    (split / "ggml").mkdir(parents=True)
    (split / "ggml" / "CMakeLists.txt").write_text("")
    target, options = bb.era_options(split)
    assert target == "llama-speculative" and "-DGGML_NATIVE=OFF" in options


def test_the_ninja_log_splits_compiles_from_links(tmp_path: Path) -> None:
    (tmp_path / ".ninja_log").write_text(
        "# ninja log v5\n"
        "0\t1500\t1\tggml/src/CMakeFiles/ggml.dir/ggml.c.o\tabc\n"
        "10\t4010\t1\tsrc/CMakeFiles/llama.dir/llama.cpp.o\tdef\n"
        "4010\t4200\t1\tsrc/libllama.a\tghi\n"
        "4200\t4900\t1\tbin/llama-speculative\tjkl\n"
    )
    assert bb.ninja_split(tmp_path) == (5.5, 0.89, 2)


def test_the_summary_compares_kinds_over_the_trees_all_of_them_built() -> None:
    def row(version: str, kind: str, seconds: float, ok: bool = True) -> bb.Build:
        return bb.Build(version, kind, "t", 1.0, seconds - 1.0, None, None, None, 0, 0, 1.0, ok)

    rows = [row("a", "today", 100), row("a", "chosen", 60), row("b", "today", 300), row("b", "chosen", 150)]
    rows += [row("c", "today", 50), row("c", "chosen", 10, ok=False), row("b", "warm", 1)]
    assert bb.summary(rows) == [
        "mean cold build over 2 trees: today 200 s (1.00x today's)",
        "mean cold build over 2 trees: chosen 105 s (0.53x today's)",
    ]
    assert bb.summary([row("a", "chosen", 60)]) == []  # nothing to compare with


def test_a_changed_file_costs_the_objects_compiled_from_it() -> None:
    objects = {"a.o": {"a.c", "common.h"}, "b.o": {"b.c", "common.h"}, "c.o": {"c.c"}, "d.o": {"d.c"}}
    assert bb.hit_rate(objects, ["common.h"], 1) == 0.5  # two of four objects read it
    assert bb.hit_rate(objects, ["docs.md", "c.c"], 5) == 0.75  # at most what changed
    one = bb.hit_rate(objects, ["a.c", "b.c", "c.c", "d.c"], 1, draws=400)
    assert 0.74 < one <= 0.76  # any one source: three of four objects hit
    assert bb.hit_rate(objects, ["a.c", "b.c", "c.c", "d.c"], 4) == 0.0


def test_changed_files_are_those_that_differ(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for root, files in (
        (old, {"same": "x", "edited": "1", "gone": "g"}),
        (new, {"same": "x", "edited": "2", "added": "a"}),
    ):
        (root / "sub").mkdir(parents=True)
        for name, text in files.items():
            (root / "sub" / name).write_text(text)
    assert bb.changed_files(old, new) == ["sub/added", "sub/edited", "sub/gone"]


def test_the_tree_bisect_line_says_whether_the_culprit_is_the_right_one() -> None:
    from bench import bench_bisect_trees as trees

    report = {
        "wall": 598.4,
        "status": "found",
        "first_bad": "2d67ba6042027dadb69d0c24311e455dd89e04b0",
        "builds": 8,
        "runs": 2952,
        "cost": {"actual": {"build_seconds": 274.7}},
        "verdicts": [
            {"arm": "main", "role": "step"},
            {"arm": "server", "role": "culprit", "verdict": "not-applicable"},
        ],
    }
    assert trees.line("new", report, report["first_bad"]) == (
        "     new:    598 s wall, found 2d67ba604202 (right), 8 builds (275 s building the main target), "
        "2952 runs; arm verdicts: culprit not-applicable"
    )
    assert "(WRONG)" in trees.line("new", report, "0" * 40)
    assert [e[0] for e in trees.ERAS[:4]] == ["0.2.44", "0.2.50", "0.2.55", "0.2.60"]
    assert [e[1] for e in trees.ERAS].index("bad") == 3  # the first BAD tree: the 0.2.60 import
