"""Structure-aware fuzzing of the history grouping (issue 47): ``--group-by REGEX`` of
``history`` / ``check --against-history`` and ``/history?group_by=`` run a pattern the
user gives on every run name (``compare/history_groups.py``).

Each input is one pattern, built from RE2 and Python ``re`` syntax pieces (groups,
named groups, classes, escapes, Unicode classes, flags, quantifiers up to
``{99999999999}``, backreferences and lookaround RE2 refuses, nesting hundreds deep),
literals (ASCII, accents, astral characters, NUL, newlines, the lone surrogates a
file system gives for bytes that are not UTF-8 and others) and whole hostile patterns
(``(a+)+b``, 1,000 nested groups, 5,000 characters, ``(.*){1000}``), matched against
:data:`NAMES_PER_INPUT` run names of the same alphabet (up to 4,096 characters: long
runs of ``a``, surrogates, empty).

Checks per input, as the two front doors call them:

* ``history.check_options(pattern)`` returns, or raises ``ValueError`` whose message
  starts with ``--group-by`` (the CLI's exit 2, the plugin's 400);
* when it returns, ``history_groups.group_key(pattern, name)`` for each name returns
  None or a non-empty ``str`` found in the name as it is shown;
* the compile, and each match, take at most :data:`MAX_SECONDS` (the issue: a hostile
  ``group_by`` costs TensorBoard < 100 ms; a history runs it once on each run name).

Any other exception is a failure, printed with its seed and input number (``replay``
rebuilds it). Input ``i`` of seed ``s`` depends on ``(s, i)`` alone.

    python benchmarks/fuzz_groups.py [--count 1000000] [--seed 0] [--seconds S]
    python benchmarks/fuzz_groups.py --seed 0 --replay 969 7378   # those inputs again

tests/test_fuzz_groups.py runs it on a fixed budget; the large figure goes to
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tb_kineto_insights.compare.history import check_options  # noqa: E402
from tb_kineto_insights.compare.history_groups import as_shown, group_key  # noqa: E402

#: Run names matched per pattern.
NAMES_PER_INPUT = 8
#: A pattern's compile, and each of its matches, take at most this long (seconds).
MAX_SECONDS = 0.1

LITERALS = [
    "a", "b", "x", "_", "-", ".", "0", "7", "exp", "run", " ", "é", "€", "𝔘", "\x00",
    "\n", "\t", "\udcff", "\udc80", "\ud800", "\udfff", "\u202e", "\\", "/", "#",
]  # fmt: skip
META = [
    ".", "^", "$", "|", "\\d", "\\w", "\\s", "\\D", "\\W", "\\b", "\\B", "\\A", "\\z",
    "\\C", "\\pL", "\\pN", "\\p{Greek}", "\\P{Han}", "\\x41", "\\x{10FFFF}", "\\x{110000}",
    "\\u0041", "\\Q(*\\E", "\\1", "\\9", "\\k<n>", "[[:alpha:]]", "[[:foo:]]", "\\",
]  # fmt: skip
QUANTIFIERS = [
    "*", "+", "?", "*?", "+?", "??", "{2}", "{0,3}", "{3,}", "{1000}", "{1001}",
    "{99999999999}", "{2,1}", "{,5}", "**", "*+",
]  # fmt: skip
OPENERS = [
    "(", "(?:", "(?P<n>", "(?P<n1>", "(?<n>", "(?i)", "(?s)", "(?m)", "(?U)", "(?i:",
    "(?=", "(?!", "(?<=", "(?<!", "(?P=n)", "(?#", "(?x)",
]  # fmt: skip
HOSTILE = [
    "(a+)+b",
    "(a|aa)*c",
    "(.*){1000}",
    "((a{100}){100}){100}",
    "(" * 1000 + "a" + ")" * 1000,
    "(" * 1001,
    "x" * 5000,
    "[" * 3000,
    "a{99999999999}",
    "(?i)" + "[a-z]" * 2000,
    "\\p{" + "L" * 100 + "}",
    "(" + "|".join("a" * k for k in range(1, 300)) + ")+$",
    # many captures under a repetition: RE2 tracks every one (attack run, 2026-12-07)
    "(?:" + "(" * 480 + "." + ")" * 480 + ")*",
    "(?:" + "(?:" * 470 + "(" * 9 + "." + ")" * 9 + ")" * 470 + ")*",
    "(?:(((((((((.)))))))))*){90}",
    "(?:.*){99}(.*)(.*)(.*)(.*)(.*)(.*)(.*)(.*)(.*)",
]


def _piece(rng: random.Random, depth: int) -> str:
    """One random piece of a pattern (a literal, a class, a group of pieces, a
    quantified piece), nested at most ``depth`` more levels."""
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(LITERALS) * rng.choice([1, 1, 1, 2, 30])
    if roll < 0.5:
        return rng.choice(META)
    if roll < 0.62:
        inside = "".join(rng.choice(LITERALS + ["a-z", "\\d", "^", "]", "-"]) for _ in range(3))
        return "[" + inside + rng.choice(["]", "]", ""])
    if roll < 0.85 and depth > 0:
        body = "".join(_piece(rng, depth - 1) for _ in range(rng.randint(1, 3)))
        alternative = "|" + _piece(rng, depth - 1) if rng.random() < 0.3 else ""
        return rng.choice(OPENERS) + body + alternative + rng.choice([")", ")", ")", ""])
    return _piece(rng, max(depth - 1, 0)) + rng.choice(QUANTIFIERS)


def pattern(rng: random.Random) -> str:
    """A random ``group_by``: a hostile one, pieces, or a hostile one spliced into
    pieces."""
    roll = rng.random()
    if roll < 0.05:
        return rng.choice(HOSTILE)
    pieces = "".join(_piece(rng, rng.randint(0, 6)) for _ in range(rng.randint(1, 6)))
    if roll < 0.1:
        return pieces + rng.choice(HOSTILE)
    if roll < 0.12:
        return "(" * rng.randint(50, 900) + pieces + ")" * rng.randint(0, 900)
    return pieces


def name(rng: random.Random) -> str:
    """A random run name: empty, a long run of ``a``, or literals (surrogates among
    them)."""
    roll = rng.random()
    if roll < 0.05:
        return ""
    if roll < 0.2:
        return "a" * rng.choice([1, 27, 40, 1000, 4096]) + rng.choice(["", "b", "c", "_1"])
    return "".join(rng.choice(LITERALS) for _ in range(rng.randint(1, 40)))


@dataclass
class Result:
    """Counts of one run: ``inputs`` patterns, ``compiled`` of them, ``refused`` with
    the reason, ``matches`` names matched, ``failures`` (one line each), ``slowest_s``
    (one compile or match)."""

    inputs: int = 0
    compiled: int = 0
    refused: int = 0
    matches: int = 0
    failures: list[str] = field(default_factory=list)
    slowest_s: float = 0.0


def check_one(
    group_by: str, names: list[str], max_seconds: float = MAX_SECONDS
) -> tuple[str | None, bool, float]:
    """``(failure or None, compiled, slowest step in seconds)`` of one pattern over
    ``names``: the compile, then each match, at most ``max_seconds`` each."""
    t0 = time.perf_counter()
    try:
        check_options(group_by)
    except ValueError as exc:
        if not str(exc).startswith("--group-by"):
            return f"refused without saying --group-by: {exc!s:.200}", False, 0.0
        took = time.perf_counter() - t0
        return (f"the refusal took {took:.3f} s" if took > max_seconds else None), False, took
    except Exception as exc:  # noqa: BLE001 - the failure this looks for
        return f"check_options: {type(exc).__name__}: {exc!s:.200}", False, 0.0
    slowest = ("the compile", time.perf_counter() - t0)
    for n in names:
        t0 = time.perf_counter()
        try:
            key = group_key(group_by, n)
        except Exception as exc:  # noqa: BLE001
            return f"group_key on {n[:40]!r}: {type(exc).__name__}: {exc!s:.200}", True, 0.0
        if key is not None and (not isinstance(key, str) or not key or key not in as_shown(n)):
            return f"group_key on {n[:40]!r} gave {key!r:.80}, not in the name", True, 0.0
        took = time.perf_counter() - t0
        if took > slowest[1]:
            slowest = (f"a match on {len(n):,} characters", took)
    if slowest[1] > max_seconds:
        return f"{slowest[0]} took {slowest[1]:.3f} s", True, slowest[1]
    return None, True, slowest[1]


def make_input(seed: int, index: int) -> tuple[str, list[str]]:
    """The pattern and names of input ``index`` of ``seed``."""
    rng = random.Random(seed * 1_000_003 + index)
    return pattern(rng), [name(rng) for _ in range(NAMES_PER_INPUT)]


def replay(
    seed: int, index: int, max_seconds: float = MAX_SECONDS
) -> tuple[str | None, bool, float]:
    """:func:`check_one` of input ``index`` of ``seed`` again (a failure's line names
    both): a timing failure of a loaded run is checked on a quiet one so."""
    group_by, names = make_input(seed, index)
    return check_one(group_by, names, max_seconds)


def run(
    count: int, seed: int, seconds: float | None = None, max_seconds: float = MAX_SECONDS
) -> Result:
    """Up to ``count`` inputs of ``seed`` (fewer when ``seconds`` run out first); a step
    slower than ``max_seconds`` is a failure."""
    result = Result()
    stop = time.monotonic() + seconds if seconds else None
    for i in range(count):
        if stop is not None and time.monotonic() > stop:
            break
        group_by, names = make_input(seed, i)
        failure, compiled, took = check_one(group_by, names, max_seconds)
        result.inputs += 1
        result.compiled += compiled
        result.refused += not compiled and failure is None
        result.matches += len(names) if compiled else 0
        result.slowest_s = max(result.slowest_s, took)
        if failure:
            result.failures.append(f"input {i} (seed {seed}): {failure} [{group_by[:60]!r}]")
    return result


def main() -> int:  # pragma: no cover - the command
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument(
        "--replay", type=int, nargs="+", default=None, help="only these inputs of --seed"
    )
    args = ap.parse_args()
    if args.replay:
        failed = 0
        for index in args.replay:
            failure, _, took = replay(args.seed, index)
            failed += failure is not None
            print(f"input {index} (seed {args.seed}): {failure or 'ok'}, {took * 1000:.1f} ms")
        return 1 if failed else 0
    t0 = time.monotonic()
    result = run(args.count, args.seed, args.seconds)
    for line in result.failures:
        print(line)
    print(
        f"{result.inputs} patterns (seed {args.seed}) in {time.monotonic() - t0:.0f} s: "
        f"{result.compiled} compiled, {result.refused} refused with the reason, "
        f"{result.matches} names matched, {len(result.failures)} failures, "
        f"slowest {result.slowest_s * 1000:.1f} ms"
    )
    return 1 if result.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
