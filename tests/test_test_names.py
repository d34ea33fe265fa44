"""The test modules' names. They are imported by their basename (pytest's default
``rootdir``-relative import mode, no ``__init__.py``): two files of one name in different
folders break the collection of the whole suite when both are collected in one run
("import file mismatch"), which only the full run (``make test``) does. And a module's
name says whether its tests read real traces (``*_real.py``: conftest.is_real_module),
which ``make quick`` leaves out."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from conftest import is_real_module

TESTS = Path(__file__).resolve().parent


def test_no_two_test_modules_share_a_basename() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        by_name[path.name].append(str(path.relative_to(TESTS)))
    assert len(by_name) > 50  # the suite's modules were found
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


#: What reads real traces: conftest's paths to them, and the fixtures that give them.
REAL_NAMES = frozenset({"SAMPLE_LOGS", "H200X2", "SHARED_TRACES", "CASES", "SHARED"})
REAL_FIXTURES = frozenset({"shared_traces", "h200x2", "shared_cases", "s3_server"})


def real_references(path: Path) -> list[str]:
    """What the module at ``path`` names that reads real traces: one of
    :data:`REAL_NAMES`, a fixture of :data:`REAL_FIXTURES` (taken as an argument, or named
    in a string: ``usefixtures``, ``getfixturevalue``), or the folder ``"sample_logs"``
    (``REPO / "sample_logs"``); as ``"NAME:LINE"``. Docstrings do not count."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in REAL_NAMES:
            found.append(f"{node.id}:{node.lineno}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{a.name}:{node.lineno}" for a in node.names if a.name in REAL_NAMES]
        elif isinstance(node, ast.arg) and node.arg in REAL_FIXTURES:
            found.append(f"{node.arg}:{node.lineno}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and (
                node.value in REAL_FIXTURES
                or node.value == "sample_logs"
                or node.value.startswith("sample_logs/")
            )
        ):
            found.append(f"{node.value!r}:{node.lineno}")
    return found


def test_only_real_modules_read_real_traces() -> None:
    """A test that reads real traces lives in a real module (``*_real.py``, ``browser/``
    or conftest's REAL_BY_NATURE: conftest.is_real_module), which ``make quick`` leaves
    out: every other module keeps to tiny hand-written traces."""
    modules = sorted(TESTS.rglob("test_*.py"))
    real = [p for p in modules if is_real_module(p)]
    assert [p for p in real if real_references(p)]  # the check finds what it looks for
    misplaced = {
        str(p.relative_to(TESTS)): refs
        for p in modules
        if not is_real_module(p)
        and p != Path(__file__).resolve()  # (names them to look for them)
        and (refs := real_references(p))
    }
    assert misplaced == {}, "move these tests to a module named *_real.py"
