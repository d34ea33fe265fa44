"""The package stays readable as it grows: modules of one idea (at most 800 lines), no
function over 120 lines, no private name used across modules, and comments that state
reasons, not the history of the code (no "issue N" references: the commit history and
``benchmarks/RESULTS.md`` hold them). Each check is shown to fail on a made-up module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "tb_kineto_insights"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120
#: Generated modules (their size follows what they are generated from).
GENERATED = frozenset({"rule_ids.py"})
_ISSUE = re.compile(r"\b[Ii]ssues? [0-9]")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name not in GENERATED)


def long_functions(source: str) -> list[tuple[str, int]]:
    """``(name, lines)`` of every function or method over :data:`MAX_FUNCTION_LINES`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                out.append((node.name, lines))
    return out


def private_uses(source: str) -> list[str]:
    """Private names (a leading underscore) of another module of the package: imported
    (``from tb_kineto_insights.x import _y``) or reached (``module._y``)."""
    tree = ast.parse(source)
    out: list[str] = []
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "tb_kineto_insights"
        ):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{node.module}.{alias.name}")
                elif alias.name[:1].islower():
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(
                a.asname or a.name for a in node.names if a.name.startswith("tb_kineto_insights")
            )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            out.append(f"{node.value.id}.{node.attr}")
    return out


def test_no_module_over_the_limit() -> None:
    big = {
        str(p.relative_to(REPO)): n
        for p in _modules()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    }
    assert big == {}


def test_no_function_over_the_limit() -> None:
    found = {
        str(p.relative_to(REPO)): long
        for p in _modules()
        if (long := long_functions(p.read_text(encoding="utf-8")))
    }
    assert found == {}
    made_up = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    assert long_functions(made_up) == [("f", MAX_FUNCTION_LINES + 1)]


def test_no_private_name_crosses_a_module() -> None:
    found = {
        str(p.relative_to(REPO)): uses
        for p in _modules()
        if (uses := private_uses(p.read_text(encoding="utf-8")))
    }
    assert found == {}
    made_up = (
        "from tb_kineto_insights.store.cache import _sealed\n"
        "from tb_kineto_insights.trace import reader\n"
        "reader._decode()\n"
    )
    assert private_uses(made_up) == ["tb_kineto_insights.store.cache._sealed", "reader._decode"]


def test_comments_state_reasons_not_issue_numbers() -> None:
    found = [
        f"{p.relative_to(REPO)}:{i}"
        for p in _modules()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if _ISSUE.search(line)
    ]
    assert found == []
    assert _ISSUE.search("# (issue 32 §8)") and not _ISSUE.search("# an issue of size")
