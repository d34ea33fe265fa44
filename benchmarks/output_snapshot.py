"""Fingerprint every document the tool produces, to prove a refactoring changed none.

Run it before a change (``--write FILE``) and after (``--check FILE``). It takes, for
every run folder of ``sample_logs/``, ``../shared/traces`` and ``../shared/cases``, the
``report --format json`` document (for ``sample_logs/`` also the text and markdown
reports); for pairs of runs the ``diff`` documents (JSON, text, markdown) and
``check``'s verdict; ``history`` of ``sample_logs/`` (JSON and text); a ``window`` cut;
and for ``sample_logs/`` the plugin's answers on every route that serves a document
(``/summary``, ``/health``, ``/run_summary``, ``/timeline`` of every step, ``/window``
and ``/window_ranks`` of a step, ``/diff``, ``/history``, ``/across_runs``). It records
the SHA-256 of each; ``--save-dir DIR`` also writes each document there, to see what
differs. The tool is reached only through its installed entry points (the console
script and the ``tensorboard_plugins`` entry), so the script works on either side of a
move of modules.

Usage::

    .venv/bin/python benchmarks/output_snapshot.py --write /tmp/before.json
    .venv/bin/python benchmarks/output_snapshot.py --check /tmp/before.json --save-dir /tmp/after

Exit status 1 when any fingerprint differs (each difference is printed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
SHARED = (ROOT.parent / "shared").resolve()

#: Before/after pairs diffed (run folders relative to ROOT's parent or ROOT).
DIFF_PAIRS = [
    ("sample_logs/dataloader_workers0", "sample_logs/dataloader_workers4"),
    ("sample_logs/transformer_eager", "sample_logs/transformer_compile"),
    ("sample_logs/memory_leak", "sample_logs/memory_fixed"),
    ("sample_logs/ddp2_default", "sample_logs/ddp2_straggler"),
    ("sample_logs/memory_fragmentation", "sample_logs/memory_fragmentation_fixed"),
]


def run_folders() -> Iterator[Path]:
    """Every folder that directly holds a trace file, in a fixed order."""
    roots = [ROOT / "sample_logs", SHARED / "traces", SHARED / "cases"]
    for root in roots:
        if not root.is_dir():
            continue
        folders = {
            p.parent
            for p in root.rglob("*")
            if p.is_file()
            and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
            and p.name != "recording_info.json"
        }
        yield from sorted(folders)


def _cli() -> Any:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "tb-kineto-insights"]
    return script.load()


def cli_document(main: Any, argv: list[str]) -> bytes:
    """stdout of ``tb-kineto-insights ARGV`` run in this process, with its exit code."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return f"exit={code}\n".encode() + out.getvalue().encode()


def plugin_documents(logdir: Path, cache_dir: str) -> Iterator[tuple[str, bytes]]:
    """The plugin's answers for every run, worker and span of LOGDIR."""
    from tensorboard import program
    from tensorboard.backend import application
    from tensorboard.plugins.core import core_plugin
    from werkzeug.test import Client

    (entry,) = [e for e in entry_points(group="tensorboard_plugins") if e.name == "kineto_insights"]
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader(), entry.load()()])
    tb.configure(
        argv=[
            "tensorboard",
            "--logdir",
            str(logdir),
            "--kineto_insights_workers",
            "0",
            "--kineto_insights_cache_dir",
            cache_dir,
        ]
    )
    client = Client(application.TensorBoardWSGIApp(tb.flags, tb.plugin_loaders))
    prefix = "/data/plugin/kineto_insights"

    def get(route: str, **params: str) -> bytes:
        answer = client.get(f"{prefix}{route}?{urlencode(params)}")
        return f"{answer.status_code}\n".encode() + answer.get_data()

    runs = json.loads(get("/runs").split(b"\n", 1)[1])
    for run in runs["runs"]:
        first_step: str | None = None
        for worker in run["workers"]:
            for span in worker["spans"]:
                key = f"{run['run']}/{worker['worker']}/{span['span']}"
                where = {"run": run["run"], "worker": worker["worker"], "span": span["span"]}
                body = get("/summary", **where, wait="60")
                yield f"plugin /summary {key}", body
                yield f"plugin /health {key}", get("/health", **where, wait="60")
                status, _, payload = body.partition(b"\n")
                if status != b"200":
                    continue
                numbers = [s["number"] for s in json.loads(payload)["steps"]["steps"]]
                for number in numbers:
                    yield (
                        f"plugin /timeline {key} {number}",
                        get("/timeline", **where, step=str(number)),
                    )
                if numbers:
                    first_step = first_step or str(numbers[0])
                    yield (
                        f"plugin /window {key} {numbers[0]}",
                        get("/window", **where, step=str(numbers[0])),
                    )
        yield f"plugin /run_summary {run['run']}", get("/run_summary", run=run["run"], wait="60")
        if len(run["workers"]) > 1 and first_step is not None:
            yield (
                f"plugin /window_ranks {run['run']} {first_step}",
                get("/window_ranks", run=run["run"], step=first_step),
            )
    yield "plugin /history", get("/history")
    yield "plugin /across_runs", get("/across_runs")
    yield "plugin /across_runs q=memory", get("/across_runs", q="memory", limit="5")
    for base, exp in DIFF_PAIRS:
        yield (
            f"plugin /diff {base} {exp}",
            get("/diff", base_run=Path(base).name, exp_run=Path(exp).name, wait="60"),
        )


def _label(folder: Path) -> str:
    for root, prefix in ((ROOT, ""), (SHARED, "shared/")):
        with contextlib.suppress(ValueError):
            return prefix + str(folder.relative_to(root))
    return str(folder)


def _neutral(body: bytes) -> bytes:
    """``body`` with the checkout's and the shared folder's absolute paths written
    ``<repo>`` and ``<shared>``, so that a copy of the repository elsewhere (a git
    worktree) gives the same documents."""
    for path, name in ((SHARED, b"<shared>"), (ROOT, b"<repo>")):
        body = body.replace(str(path).encode(), name)
    return body


def fingerprints(save_dir: Path | None = None) -> dict[str, str]:
    """Label of each document → SHA-256 of its bytes (each written to ``save_dir``)."""
    os.environ["KINETO_INSIGHTS_PRELOAD"] = "0"
    main = _cli()
    found: dict[str, str] = {}

    def add(label: str, body: bytes) -> None:
        body = _neutral(body)
        found[label] = hashlib.sha256(body).hexdigest()
        print(f"{found[label][:12]} {label}", file=sys.stderr)
        if save_dir is not None:
            name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", label)[:200]
            (save_dir / name).write_bytes(body)

    for folder in run_folders():
        add(
            f"report {_label(folder)}",
            cli_document(main, ["report", str(folder), "--format", "json", "--cache", "none"]),
        )
        if folder.is_relative_to(ROOT / "sample_logs"):
            for fmt in ("text", "markdown"):
                add(
                    f"report-{fmt} {_label(folder)}",
                    cli_document(main, ["report", str(folder), "--format", fmt, "--cache", "none"]),
                )
    for base, exp in DIFF_PAIRS:
        add(
            f"diff {base} {exp}",
            cli_document(
                main,
                ["diff", str(ROOT / base), str(ROOT / exp), "--format", "json", "--cache", "none"],
            ),
        )
        add(
            f"diff-text {base} {exp}",
            cli_document(main, ["diff", str(ROOT / base), str(ROOT / exp), "--cache", "none"]),
        )
        add(
            f"diff-markdown {base} {exp}",
            cli_document(
                main,
                ["diff", str(ROOT / base), str(ROOT / exp), "--format", "markdown"]
                + ["--cache", "none"],
            ),
        )
        add(
            f"check {base} {exp}",
            cli_document(main, ["check", str(ROOT / base), str(ROOT / exp), "--cache", "none"]),
        )
    logs = ROOT / "sample_logs"
    for fmt in ("json", "text"):
        add(
            f"history-{fmt} sample_logs",
            cli_document(main, ["history", str(logs), "--format", fmt, "--cache", "none"]),
        )
    with tempfile.TemporaryDirectory() as out_dir:
        trace = sorted((logs / "transformer_eager").glob("*.json*"))[0]
        out = Path(out_dir) / "window.json"
        code = cli_document(main, ["window", str(trace), "--step", "3", "--out", str(out)])
        code = code.replace(out_dir.encode(), b"OUT")
        add("window transformer_eager 3", code + (out.read_bytes() if out.exists() else b""))
    with tempfile.TemporaryDirectory() as cache_dir:
        for label, body in plugin_documents(ROOT / "sample_logs", cache_dir):
            add(label, body)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="write the fingerprints to this file")
    group.add_argument("--check", type=Path, help="compare with the fingerprints in this file")
    parser.add_argument("--save-dir", type=Path, help="also write each document to this folder")
    parser.add_argument(
        "--shared", type=Path, help="the shared traces folder (default: ../shared beside the repo)"
    )
    args = parser.parse_args(argv)
    if args.shared is not None:
        global SHARED
        SHARED = args.shared.resolve()
    if args.save_dir is not None:
        args.save_dir.mkdir(parents=True, exist_ok=True)
    found = fingerprints(args.save_dir)
    if args.write:
        args.write.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        print(f"{len(found)} documents written to {args.write}")
        return 0
    expected = json.loads(args.check.read_text())
    differ = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
    for label in differ:
        print(f"differs: {label}")
    print(f"{len(found)} documents, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
