"""The committed frontend bundle (tb_kineto_insights/static/): local, safe code, served
by the plugin's fixed whitelist, and byte-identical to a fresh build of frontend/.

The rebuild needs Node and frontend/node_modules (``make frontend-test`` installs them
with ``npm ci``); without them that test is skipped with the reason, except under
``KINETO_INSIGHTS_REQUIRE_SHARED=1`` (CI), where it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from tb_kineto_insights.serve.plugin import _STATIC_FILES

STATIC = REPO / "tb_kineto_insights" / "static"
FRONTEND = REPO / "frontend"
SERVED = ("index.js", "echarts.js", "style.css")
#: Files of static/ that are built but not served.
NOT_SERVED = ("THIRD_PARTY_NOTICES.txt",)
#: Size limits (bytes), so a careless import of all of ECharts shows up.
MAX_BYTES = {"index.js": 300_000, "echarts.js": 700_000, "style.css": 40_000}


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("KINETO_INSIGHTS_REQUIRE_SHARED") == "1":
        pytest.fail(reason + " (KINETO_INSIGHTS_REQUIRE_SHARED=1)")
    pytest.skip(reason)


def test_static_holds_exactly_the_built_files() -> None:
    assert sorted(p.name for p in STATIC.iterdir()) == sorted(SERVED + NOT_SERVED)
    assert sorted(name for name, _ in _STATIC_FILES.values()) == sorted(SERVED)


@pytest.mark.parametrize("name", SERVED)
def test_bundle_is_local_code_without_eval(name: str) -> None:
    text = (STATIC / name).read_text(encoding="utf-8")
    size = len(text.encode())
    print(f"static/{name}: {size / 1024:.1f} KiB")
    assert size <= MAX_BYTES[name], f"{name} is {size} bytes"
    for forbidden in ("eval(", "new Function", "document.write", "importScripts("):
        assert forbidden not in text, f"{forbidden} in {name}"
    # nothing from the network: no URL at all (fonts, scripts, styles, source maps)
    assert not re.search(r"https?://|//[a-z0-9.-]+\.(com|org|net|io)/", text), name
    assert "sourceMappingURL" not in text
    assert "@import" not in text and "@font-face" not in text


def test_index_js_is_our_code_only() -> None:
    """index.js: an ES module exporting render(); the chart library comes from echarts.js
    by a dynamic import relative to the module; names never reach innerHTML."""
    text = (STATIC / "index.js").read_text(encoding="utf-8")
    assert re.search(r"^export async function render\(\)", text, re.MULTILINE)
    assert "import.meta.url" in text
    assert 'new URL("echarts.js"' in text
    for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "DOMParser"):
        assert forbidden not in text
    assert "import " not in text.replace("import.meta", "")


def test_echarts_js_is_a_tree_shaken_module() -> None:
    text = (STATIC / "echarts.js").read_text(encoding="utf-8")
    assert text.startswith("/* Apache ECharts ")
    assert re.search(r"export\s*\{[^}]*\binit\b", text)
    # tree-shaken: the canvas renderer only (no SVG renderer), well under the ~1 MB of
    # a full echarts.min.js (MAX_BYTES), with LTTB sampling for the line charts
    assert "createElementNS" not in text
    assert "lttb" in text


def _tool(name: str) -> str | None:
    return shutil.which(name)


def test_bundle_matches_a_fresh_build(tmp_path: Path) -> None:
    node = _tool("node")
    if node is None or _tool("npm") is None:
        _skip_or_fail("node/npm not found: cannot rebuild the frontend")
    if not (FRONTEND / "node_modules" / "esbuild").is_dir():
        _skip_or_fail("frontend/node_modules is missing: run `make frontend-test` (npm ci) first")
    assert node is not None
    out = tmp_path / "static"
    run = subprocess.run(
        [node, "build.mjs", "--outdir", str(out)],
        cwd=FRONTEND,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    print(run.stdout)
    built = sorted(p.name for p in out.iterdir())
    assert built == sorted(SERVED + NOT_SERVED)
    stale = [n for n in built if (out / n).read_bytes() != (STATIC / n).read_bytes()]
    assert not stale, f"static/ is not the build of frontend/ ({stale}): run `make frontend`"
