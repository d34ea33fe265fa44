"""Test modules are imported by their basename (pytest's default ``rootdir``-relative
import mode, no ``__init__.py``): two files of one name in different folders break the
collection of the whole suite when both are collected in one run ("import file
mismatch"), which only the full run (``make test``) does."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_modules_share_a_basename() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        by_name[path.name].append(str(path.relative_to(TESTS)))
    assert len(by_name) > 50  # the suite's modules were found
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
