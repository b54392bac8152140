"""A self-contained demo target: a tiny C++ speculative sampler and a git history with a known bug.

Why: bisectbot's whole pipeline (checkout → cmake build → seed sweep → sequential test →
bisect) needs a target that builds in seconds, whose correct output distribution is known
*exactly*, and whose history contains the same kind of defect as the motivating llama.cpp bug
(the draft loop proposing its top candidate instead of a sampled token while the acceptance
ratio still uses q). ``generate_demo`` writes such a repository plus a ready-to-run config.

The Markov tables live here, in Python, and ``src/tables.h`` is generated from them, so the
exact reference (``reference_probs``) and the compiled program cannot diverge.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from bisectbot.edges.procs import run

# --- the model ------------------------------------------------------------------------------

VOCAB = "abcdef"
PROMPT = "ab"
N_PREDICT = 4
DRAFT_MAX = 3
CONDITION_TOKEN = "c"

# Target p(next | prev): row = previous token, column = next token (a..f). Decimal literals so
# Python and C++ parse the very same doubles.
TARGET_PROBS: tuple[tuple[float, ...], ...] = (
    (0.10, 0.30, 0.15, 0.20, 0.15, 0.10),  # a
    (0.10, 0.15, 0.40, 0.10, 0.15, 0.10),  # b  (prompt ends in b: P(token0 = c) = 0.4)
    (0.10, 0.20, 0.05, 0.30, 0.25, 0.10),  # c  (the reference row for token1 | token0 = c)
    (0.25, 0.10, 0.20, 0.10, 0.15, 0.20),  # d
    (0.15, 0.20, 0.15, 0.15, 0.10, 0.25),  # e
    (0.30, 0.15, 0.10, 0.15, 0.20, 0.10),  # f
)

# Draft q(next | prev): a noisy copy of the target whose argmax often differs (rows a, c, d, e).
# Row c over-weights b (0.32 vs 0.20), so a greedy draft proposes b and gets it accepted 62.5%
# of the time: the defect moves token1 | token0 = c by TV 0.425.
DRAFT_PROBS: tuple[tuple[float, ...], ...] = (
    (0.15, 0.20, 0.25, 0.15, 0.15, 0.10),  # a  argmax c (target: b)
    (0.10, 0.15, 0.45, 0.10, 0.10, 0.10),  # b  argmax c (target: c)
    (0.10, 0.32, 0.05, 0.25, 0.20, 0.08),  # c  argmax b (target: d)
    (0.20, 0.15, 0.15, 0.12, 0.15, 0.23),  # d  argmax f (target: a)
    (0.15, 0.15, 0.22, 0.15, 0.13, 0.20),  # e  argmax c (target: f)
    (0.25, 0.20, 0.10, 0.15, 0.20, 0.10),  # f  argmax a (target: a)
)


def _index(token: str) -> int:
    if len(token) != 1 or token not in VOCAB:
        raise ValueError(f"token {token!r} is not one of {VOCAB!r}")
    return VOCAB.index(token)


def _argmax(row: tuple[float, ...]) -> int:
    """Lowest index of the maximum, like the C++ ``argmax``."""
    return max(range(len(row)), key=lambda i: (row[i], -i))


def _residual(prev: int) -> list[float]:
    """Normalised max(0, p - q), falling back to p when it is all zero (as the C++ does)."""
    p, q = TARGET_PROBS[prev], DRAFT_PROBS[prev]
    r = [max(0.0, pi - qi) for pi, qi in zip(p, q)]
    total = sum(r)
    return [x / total for x in r] if total > 0 else list(p)


def _kernel(prev: int, defect: bool) -> list[float]:
    """Distribution of the next emitted token given the previous one.

    Correct speculative sampling emits exactly p. With the defect the draft always proposes
    m = argmax q, accepted with probability min(1, p_m/q_m), else a residual sample; with
    draft-max >= 1 every token after the prompt is such a proposal or its replacement.
    """
    p, q = TARGET_PROBS[prev], DRAFT_PROBS[prev]
    if not defect:
        return list(p)
    m = _argmax(q)
    accept = min(1.0, p[m] / q[m])
    out = [(1.0 - accept) * r for r in _residual(prev)]
    out[m] += accept
    return out


def reference_probs(condition_token: str = CONDITION_TOKEN, *, defect: bool = False) -> dict[str, float]:
    """Exact distribution of token 1 given token 0 == condition_token.

    ``defect=False`` is the reference (the target row); ``defect=True`` is what the buggy
    binary produces, for tests that need the expected 'bad' distribution.
    """
    row = _kernel(_index(condition_token), defect)
    return {VOCAB[i]: row[i] for i in range(len(VOCAB))}


def condition_prob(condition_token: str = CONDITION_TOKEN, *, prompt: str = PROMPT, defect: bool = False) -> float:
    """Exact P(token 0 == condition_token) after ``prompt`` (only its last letter matters)."""
    if not prompt:
        raise ValueError("prompt must be non-empty")
    return _kernel(_index(prompt[-1]), defect)[_index(condition_token)]


def total_variation(p: dict[str, float], q: dict[str, float]) -> float:
    """Total-variation distance between two distributions over the same letters."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def simulate(prompt: str, n: int, rng: random.Random, *, draft_max: int = DRAFT_MAX, defect: bool = False) -> str:
    """Python mirror of the C++ algorithm (not its RNG stream); used to check the exact numbers."""

    def sample(weights: list[float] | tuple[float, ...]) -> int:
        return rng.choices(range(len(weights)), weights=weights)[0]

    out: list[int] = []
    prev = _index(prompt[-1])
    while len(out) < n:
        draft, ctx = [], prev
        for _ in range(min(draft_max, n - len(out))):
            tok = _argmax(DRAFT_PROBS[ctx]) if defect else sample(DRAFT_PROBS[ctx])
            draft.append(tok)
            ctx = tok
        ctx, all_accepted = prev, True
        for tok in draft:
            p, q = TARGET_PROBS[ctx], DRAFT_PROBS[ctx]
            if rng.random() * q[tok] < p[tok]:
                out.append(tok)
                ctx = tok
                continue
            ctx = sample(_residual(ctx))
            out.append(ctx)
            all_accepted = False
            break
        if all_accepted and len(out) < n:
            ctx = sample(TARGET_PROBS[ctx])
            out.append(ctx)
        prev = ctx
    return prompt + "".join(VOCAB[t] for t in out)


def render_tables_h() -> str:
    """The C++ header holding the tables, generated so it cannot drift from the Python data."""

    def rows(table: tuple[tuple[float, ...], ...]) -> str:
        return "\n".join(
            "    {" + ", ".join(repr(float(x)) for x in row) + "}," + f" // {VOCAB[i]}"
            for i, row in enumerate(table)
        )

    k = len(VOCAB)
    return (
        "#pragma once\n\n"
        "// Generated by bisectbot.demo from TARGET_PROBS / DRAFT_PROBS; edit those, not this.\n\n"
        f"constexpr int N_VOCAB = {k};\n"
        f'constexpr char VOCAB[N_VOCAB + 1] = "{VOCAB}";\n\n'
        "// target p(next | prev): row = prev, column = next\n"
        f"constexpr double TARGET_PROBS[N_VOCAB][N_VOCAB] = {{\n{rows(TARGET_PROBS)}\n}};\n\n"
        "// draft q(next | prev): a cheaper, noisier copy of the target\n"
        f"constexpr double DRAFT_PROBS[N_VOCAB][N_VOCAB] = {{\n{rows(DRAFT_PROBS)}\n}};"
    )


# --- the history ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoHistory:
    repo: Path  # the generated git repo (a normal repo with a work tree)
    config: Path  # a bisectbot YAML config for it, written next to the repo
    good: str  # full sha of the first commit (correct)
    bad: str  # full sha of HEAD (defect present)
    culprit: str  # full sha of the commit that introduced the defect
    build_break: str  # full sha of the commit that breaks the build (fixed by the next commit)
    commits: tuple[str, ...]  # first-parent line good..bad inclusive, oldest first
    crash: str | None = None  # first commit whose binary aborts, if requested
    hang: str | None = None  # first commit whose binary sleeps forever, if requested


_DRAFT_PICK_OK = "            const int id = sample_categorical(q, N_VOCAB, rng);"
_DRAFT_PICK_DEFECT = "            const int id = argmax(q, N_VOCAB); // top candidate: saves a sampling call"

_PARSE_UINT = (
    """bool parse_uint(const std::string & s, unsigned long long & out) {
    if (s.empty()) {
        return false;
    }
    unsigned long long v = 0;
    for (const char c : s) {
        if (c < '0' || c > '9') {
            return false;
        }
        v = v * 10 + static_cast<unsigned long long>(c - '0');
    }
    out = v;
    return true;
}""",
    """bool parse_uint(const std::string & s, unsigned long long & out) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
        return false;
    }
    unsigned long long v = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        v = 10 * v + static_cast<unsigned long long>(s[i] - '0');
    }
    out = v;
    return true;
}""",
)

# Unused helpers (name, C++ body with {name}); they change the object code, not the behaviour.
_HELPERS: tuple[tuple[str, str], ...] = (
    ("join_tokens", "std::string {name}(const std::vector<int> & ids) {{\n    std::string s;\n    for (const int id : ids) {{\n        s += letter_of(id);\n    }}\n    return s;\n}}"),
    ("count_letter", "int {name}(const std::string & text, char c) {{\n    int n = 0;\n    for (const char t : text) {{\n        n += t == c;\n    }}\n    return n;\n}}"),
    ("is_vocab_text", "bool {name}(const std::string & text) {{\n    for (const char c : text) {{\n        if (token_of(c) < 0) {{\n            return false;\n        }}\n    }}\n    return true;\n}}"),
    ("row_mass", "double {name}(const double * row) {{\n    double s = 0.0;\n    for (int i = 0; i < N_VOCAB; ++i) {{\n        s += row[i];\n    }}\n    return s;\n}}"),
    ("tokenize", "std::vector<int> {name}(const std::string & text) {{\n    std::vector<int> ids;\n    ids.reserve(text.size());\n    for (const char c : text) {{\n        ids.push_back(token_of(c));\n    }}\n    return ids;\n}}"),
)
_BROKEN_HELPER = "std::string describe_vocab() {\n    return std::string(VOCAB, N_VOCAB)\n}"
_FIXED_HELPER = "std::string describe_vocab() {\n    return std::string(VOCAB, N_VOCAB);\n}"

_NOTES = (
    "// Note: the draft must *sample* its proposals; the ratio p/q assumes x ~ q.",
    "// Note: a rejected round still emits one token, so every round makes progress.",
    "// Note: residual weights need not sum to one; sample_categorical normalises them.",
    "// Note: the bonus token is why an all-accepted round emits n_draft + 1 tokens.",
    "// Note: acceptance compares u * q(x) < p(x) to avoid a division.",
    "// Note: expected tokens per round is (1 - a^(k+1)) / (1 - a) for acceptance rate a.",
)
_DOC_LINES = (
    ("docs: describe the draft/target tables", "- The tables in `src/tables.h` are generated; do not edit them by hand."),
    ("docs: explain --draft-max", "- `--draft-max 0` degenerates to plain sampling from the target."),
    ("docs: note output format", "- Output is the prompt followed by exactly `-n` generated letters."),
    ("docs: mention determinism", "- Output depends only on `--seed`, `--prompt`, `-n` and `--draft-max`."),
    ("docs: add reference to the speculative sampling papers", "- See Leviathan et al. 2023 and Chen et al. 2023."),
    ("docs: fix typo in notes", "- Acceptance rate depends on how close q is to p."),
)
_HOOK_CRASH = """    {
        // draft and target must share a vocabulary
        const int n_vocab_tgt = 6;
        const int n_vocab_dft = static_cast<int>(prompt.size()) + 6;
        if (n_vocab_tgt != n_vocab_dft) {
            std::fprintf(stderr, "GGML_ASSERT(n_vocab_tgt == n_vocab_dft) failed\\n");
            std::abort();
        }
    }"""
_HOOK_HANG = """    // wait for the draft model to warm up
    for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }"""

_AUTHORS = (
    ("Ada Lindqvist", "ada@example.com"),
    ("Bo Zhang", "bo@example.com"),
    ("Carmen Ruiz", "carmen@example.com"),
    ("Dev Patel", "dev@example.com"),
)
_EPOCH0 = 1709283600  # 2024-03-01 09:00:00 UTC


@dataclass
class _State:
    """Everything that varies between commits; the files are a pure function of it."""

    version: int = 0
    parse_style: int = 0
    helpers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    doc_lines: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    defect: bool = False


def _templates() -> dict[str, str]:
    """Template files shipped in bisectbot/demo/src, keyed by relative posix path."""
    out: dict[str, str] = {}

    def walk(node: resources.abc.Traversable, prefix: str) -> None:
        for child in node.iterdir():
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, rel + "/")
            else:
                out[rel] = child.read_text(encoding="utf-8")

    walk(resources.files("bisectbot.demo") / "src", "")
    return out


def _render(templates: dict[str, str], st: _State) -> dict[str, str]:
    hook_includes = ""
    if _HOOK_HANG in st.hooks:
        hook_includes = "#include <chrono>\n#include <thread>\n"
    subs = {
        "@@TABLES@@": render_tables_h(),
        "@@VERSION@@": f"0.1.{st.version}",
        "@@PARSE_UINT@@": _PARSE_UINT[st.parse_style],
        "@@HELPERS@@": "".join("\n" + h + "\n" for h in st.helpers).rstrip("\n"),
        "@@NOTES@@": "".join(n + "\n" for n in st.notes),
        "@@DRAFT_PICK@@": _DRAFT_PICK_DEFECT if st.defect else _DRAFT_PICK_OK,
        "@@HOOK_INCLUDES@@": hook_includes,
        "@@HOOKS@@": "".join(h + "\n" for h in st.hooks),
    }
    files: dict[str, str] = {}
    for rel, text in templates.items():
        for key, value in subs.items():
            text = text.replace(key, value)
        if rel == "docs/NOTES.md" and st.doc_lines:
            text += "\n" + "\n".join(st.doc_lines) + "\n"
        files[rel] = text
    return files


def _git_env() -> dict[str, str]:
    """Environment isolated from the user's git config and from any outer GIT_DIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    return env


def _git(repo: Path, *args: str, env: dict[str, str]) -> str:
    res = run(["git", "-C", str(repo), *args], env=env, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {res.stderr.strip() or 'timed out'}")
    return res.stdout.strip()


def _pick_positions(
    n: int, rng: random.Random, culprit: int | None, brk: int | None, crash: int | None, hang: int | None
) -> tuple[int, int]:
    """Resolve culprit and break positions (drawn from rng when None) and check they don't collide."""
    if n < 5:
        raise ValueError(f"n_commits must be at least 5, got {n}")
    for name, v, lo, hi in (
        ("culprit_index", culprit, 1, n - 1),
        ("break_index", brk, 1, n - 2),
        ("crash_index", crash, 1, n - 1),
        ("hang_index", hang, 1, n - 1),
    ):
        if v is not None and not lo <= v <= hi:
            raise ValueError(f"{name}={v} out of range [{lo}, {hi}] for n_commits={n}")
    taken = {v for v in (crash, hang) if v is not None}
    if culprit is None:
        choices = [i for i in range(2, n - 1) if i not in taken and (brk is None or i not in (brk, brk + 1))]
        if not choices:
            raise ValueError("no room for the culprit commit")
        culprit = rng.choice(choices)
    if brk is None:
        choices = [i for i in range(1, n - 1) if not {i, i + 1} & (taken | {culprit})]
        if not choices:
            raise ValueError("no room for the build-break commit")
        brk = rng.choice(choices)
    special = [culprit, brk, brk + 1, *sorted(taken)]
    if len(set(special)) != len(special) or (crash is not None and crash == hang):
        raise ValueError(
            f"culprit={culprit}, break={brk} (fixed at {brk + 1}), crash={crash}, hang={hang} must be distinct commits"
        )
    return culprit, brk


def generate_demo(
    dest: Path,
    *,
    n_commits: int = 100,
    culprit_index: int | None = None,
    break_index: int | None = None,
    seed: int = 0,
    crash_index: int | None = None,
    hang_index: int | None = None,
) -> DemoHistory:
    """Write ``dest/repo`` (a git history of the demo) and ``dest/specdemo.yaml`` (its config).

    Commit 0 is correct; commit ``culprit_index`` makes the draft greedy; ``break_index`` adds a
    syntax error in util.cpp that the next commit fixes; from ``crash_index`` the binary aborts
    and from ``hang_index`` it sleeps forever (if both are active the earlier one wins). All other
    commits are behaviour-preserving code or docs changes. Identity and dates are fixed, so the
    shas depend only on the arguments.
    """
    dest = Path(dest)
    rng = random.Random(seed)
    culprit_index, break_index = _pick_positions(n_commits, rng, culprit_index, break_index, crash_index, hang_index)
    repo = dest / "repo"
    if repo.exists() and any(repo.iterdir()):
        raise FileExistsError(f"{repo} exists and is not empty")
    repo.mkdir(parents=True, exist_ok=True)
    env = _git_env()
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)

    templates = _templates()
    st = _State()
    shas: list[str] = []
    pr = 1000
    kinds = ("version", "helper", "refactor", "comment", "docs", "docs")
    for i in range(n_commits):
        pr += rng.randint(1, 9)
        body = ""
        if i == 0:
            subject = "specdemo: speculative sampling demo"
            body = "Draft proposes up to --draft-max tokens sampled from q; the target accepts with min(1, p/q)."
        elif i == culprit_index:
            st.defect = True
            subject = "speculative: take top draft candidate"
            body = "Propose the draft's most likely token instead of sampling it; saves one sampling call per draft step."
        elif i == break_index:
            st.helpers.append(_BROKEN_HELPER)
            subject = "util: add describe_vocab helper"
        elif i == break_index + 1:
            st.helpers[st.helpers.index(_BROKEN_HELPER)] = _FIXED_HELPER
            subject = "util: fix build (missing semicolon in describe_vocab)"
        elif i == crash_index:
            st.hooks.append(_HOOK_CRASH)
            subject = "main: assert draft and target vocab sizes match"
        elif i == hang_index:
            st.hooks.append(_HOOK_HANG)
            subject = "main: wait for draft warmup before generating"
        else:
            kind = rng.choice(kinds)
            if kind == "version":
                st.version += 1
                subject = f"build: bump version to 0.1.{st.version}"
            elif kind == "helper":
                name, tpl = _HELPERS[len(st.helpers) % len(_HELPERS)]
                uses = sum(1 for h in st.helpers if f" {name}" in h)
                fname = name if uses == 0 else f"{name}_v{uses + 1}"
                st.helpers.append(tpl.format(name=fname))
                subject = f"util: add {fname} helper"
            elif kind == "refactor":
                st.parse_style ^= 1
                subject = "util: simplify parse_uint" if st.parse_style else "util: parse_uint with a plain loop"
            elif kind == "comment":
                k = len(st.notes)
                note = _NOTES[k % len(_NOTES)]
                st.notes.append(note if k < len(_NOTES) else f"{note} ({k // len(_NOTES) + 1})")
                subject = "speculative: clarify comments"
            else:
                k = len(st.doc_lines)
                subject, line = _DOC_LINES[k % len(_DOC_LINES)]
                st.doc_lines.append(line if k < len(_DOC_LINES) else f"{line} ({k // len(_DOC_LINES) + 1})")
        subject = f"{subject} (#{pr})"

        for rel, text in _render(templates, st).items():
            path = repo / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
        name, email = _AUTHORS[rng.randrange(len(_AUTHORS))]
        date = f"{_EPOCH0 + i * 3 * 3600 + rng.randrange(3600)} +0000"
        cenv = dict(
            env,
            GIT_AUTHOR_NAME=name,
            GIT_AUTHOR_EMAIL=email,
            GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_NAME=name,
            GIT_COMMITTER_EMAIL=email,
            GIT_COMMITTER_DATE=date,
        )
        _git(repo, "add", "--all", ".", env=cenv)
        msg = ["-m", subject] + (["-m", body] if body else [])
        _git(repo, "commit", "-q", "--no-verify", *msg, env=cenv)
        shas.append(_git(repo, "rev-parse", "HEAD", env=cenv))

    config = dest / "specdemo.yaml"
    config.write_text(_config_yaml(), encoding="utf-8")
    return DemoHistory(
        repo=repo,
        config=config,
        good=shas[0],
        bad=shas[-1],
        culprit=shas[culprit_index],
        build_break=shas[break_index],
        commits=tuple(shas),
        crash=shas[crash_index] if crash_index is not None else None,
        hang=shas[hang_index] if hang_index is not None else None,
    )


def demo_config() -> dict:
    """The bisectbot config for a generated demo (repo path relative to the config file)."""
    return {
        "name": "specdemo",
        "repo": {"path": "./repo"},
        "build": {
            "cmake_args": ["-DCMAKE_BUILD_TYPE=Release"],
            "targets": ["specdemo"],
            "binaries": {"binary": ["specdemo", "bin/specdemo"]},
            "timeout": 300,
        },
        "run": {
            "argv": ["{binary}", "--seed", "{seed}", "--prompt", PROMPT, "-n", str(N_PREDICT)],
            "first_seed": 1,
            "max_runs": 6000,
            "timeout": 10,
            "jobs": 0,
        },
        "parse": {"prefix": PROMPT, "split": "chars", "expect_tokens": N_PREDICT},
        "statistic": {"condition": {"position": 0, "token": CONDITION_TOKEN}, "outcome": {"position": 1}},
        "reference": {
            "probs": reference_probs(CONDITION_TOKEN),
            "condition_prob": condition_prob(CONDITION_TOKEN),
        },
        "test": {"alpha": 0.0005, "beta": 0.0005, "tolerance": 0.1},
    }


def _config_yaml() -> str:
    header = "# bisectbot config for the generated specdemo history (bisectbot.demo.generate_demo)\n"
    return header + yaml.safe_dump(demo_config(), sort_keys=False, default_flow_style=None)
