"""The tests of ``test_window.py``'s subject that read real traces (``sample_logs/``,
``../shared``): ``make quick`` leaves out a module named ``*_real.py``
(``tests/conftest.py``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import SAMPLE_LOGS
from test_window import _events

from tb_kineto_insights.cli.main import main
from tb_kineto_insights.service.windows import step_window
from tb_kineto_insights.trace.reader import read_trace
from tb_kineto_insights.trace.window import cut_window, ns_of, partial_overlaps

WITH_STACK = SAMPLE_LOGS / "capture_full" / "vm_520.1796082237887330460.pt.trace.json.gz"


@pytest.mark.skipif(not WITH_STACK.exists(), reason="sample_logs/capture_full missing")
def test_window_command_on_a_with_stack_trace(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "w.json.gz"
    trace = read_trace(str(WITH_STACK))
    assert trace.health.flags["has_stacks"]
    assert partial_overlaps(gzip.decompress(WITH_STACK.read_bytes())) > 0  # what Perfetto drops
    for step in (3, 5):
        code = main(["window", str(WITH_STACK), "--step", str(step), "--out", str(out)])
        assert code == 0
        said = capsys.readouterr().out
        w = step_window(str(WITH_STACK), step)
        margin = (w.end_ns - w.start_ns) // 10
        lo, hi = w.start_ns - margin, w.end_ns + margin
        data = gzip.decompress(out.read_bytes())
        assert partial_overlaps(data) == 0
        doc = json.loads(data)
        k = trace.kernels
        inside = (k.start_ns < hi) & (k.start_ns + k.dur_ns > lo)
        kept = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        assert len(kept) == int(inside.sum()) > 0
        names = sorted(trace.names[int(n)] for n in k.name[inside])
        assert sorted(e["name"] for e in kept) == names
        # the step's own CPU marker is in the cut
        assert f"ProfilerStep#{step}" in {e["name"] for e in doc["traceEvents"]}
        assert f"{len(kept)} kernels" in said
    # a window given in µs after the step window's start
    code = main(
        ["window", str(WITH_STACK), "--step", "3", "--start-us", "0", "--end-us", "100"]
        + ["--out", str(out)]
    )
    assert code == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    w = step_window(str(WITH_STACK), 3)
    ts_ns = [
        ns_of(msgspec.Raw(json.dumps(e["ts"]).encode())) for e in doc["traceEvents"] if "ts" in e
    ]
    assert all(t is not None and t < w.start_ns + 100_000 + 1000 for t in ts_ns)
    assert np.any(np.array([t for t in ts_ns if t is not None]) >= w.start_ns)


def _doc_bytes(cut: Any) -> bytes:
    return msgspec.json.encode(cut.document)


@pytest.mark.skipif(not WITH_STACK.exists(), reason="sample_logs/capture_full missing")
def test_the_cut_in_small_pieces_is_the_cut_in_one(tmp_path: Path, monkeypatch: Any) -> None:
    """The streamed cut (pieces of ``PIECE_BYTES``) gives the same document, byte for
    byte, with pieces of 2 KiB (the file is 400 KiB) as with one piece; plain and gzip
    files alike."""
    from tb_kineto_insights.trace import window_events as win

    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(WITH_STACK.read_bytes()))
    w = step_window(str(WITH_STACK), 4)
    windows = [(w.start_ns, w.end_ns), (0, 2**62), (w.start_ns - 1, w.start_ns + 1)]
    whole = {bounds: _doc_bytes(cut_window(str(WITH_STACK), *bounds)) for bounds in windows}
    monkeypatch.setattr(win, "PIECE_BYTES", 2048)
    for path in (WITH_STACK, plain):
        for bounds in windows:
            assert _doc_bytes(cut_window(str(path), *bounds)) == whole[bounds]


@pytest.mark.skipif(not WITH_STACK.exists(), reason="sample_logs/capture_full missing")
def test_the_window_command_reads_the_file_once(tmp_path: Path, monkeypatch: Any) -> None:
    """``window`` finds the step and cuts it from one read of the file: the cut reads back
    only the pieces that meet the window (from the inflater's checkpoints), and gives
    the document ``cut_window`` gives. The with_stack sample repeated 12 times (60
    steps, 5 MB of JSON), pieces of 64 KiB, a checkpoint every 128 KiB."""
    import subprocess
    import sys

    from conftest import REPO

    from tb_kineto_insights.service.windows import window_of_step
    from tb_kineto_insights.trace import source
    from tb_kineto_insights.trace import window_events as win

    scaled = tmp_path / "scaled.json.gz"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "scale_trace.py"), str(WITH_STACK)]
        + ["-o", str(scaled), "--repeat", "12"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    monkeypatch.setattr(win, "PIECE_BYTES", 64 * 1024)
    monkeypatch.setattr(source, "CHECKPOINT_SPACING_BYTES", 128 * 1024)
    monkeypatch.setattr(source, "COMPRESSED_READ_BYTES", 4096)  # reads as small as that
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(scaled.read_bytes()))
    read: list[int] = []
    opened = source.open_stored

    class Counted:
        def __init__(self, f: Any) -> None:
            self.f = f

        def read(self, n: int = -1) -> bytes:
            data = self.f.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

        def __enter__(self) -> Any:
            self.f.__enter__()
            return self

        def __exit__(self, *exc: Any) -> Any:
            return self.f.__exit__(*exc)

    monkeypatch.setattr(source, "open_stored", lambda p: Counted(opened(p)))
    for path in (scaled, plain):
        for step, bounds in ((30, None), (41, (100.0, 900.0))):
            read.clear()
            cut = window_of_step(str(path), step, *(bounds or (None, None)))
            size = path.stat().st_size
            assert size <= sum(read) < 1.3 * size  # the read, and the pieces read back
            w = step_window(str(path), step)
            if bounds is None:
                margin = (w.end_ns - w.start_ns) // 10
                lo, hi = w.start_ns - margin, w.end_ns + margin
            else:
                lo, hi = w.start_ns + 100_000, w.start_ns + 900_000
            assert (cut.start_ns, cut.end_ns) == (lo, hi)
            assert _doc_bytes(cut) == _doc_bytes(cut_window(str(path), lo, hi))
            assert cut.kernels > 0


DDP2 = SAMPLE_LOGS / "ddp2_straggler"


@pytest.mark.skipif(not DDP2.is_dir(), reason="sample_logs/ddp2_straggler missing")
def test_window_of_every_rank_merges_them(tmp_path: Path, capsys: Any) -> None:
    """``window RANK0 RANK1 --step N``: one trace holding each rank's window of the step,
    each rank's processes apart (their own pids, names prefixed with the rank), every
    kernel of each rank's cut kept, no partial overlaps on any track."""
    from tb_kineto_insights.service.windows import window_of_step

    paths = sorted(str(p) for p in DDP2.glob("rank*.pt.trace.json.gz"))
    assert len(paths) == 2
    step = int(build_steps(paths[0])[1])
    out = tmp_path / "ranks.json.gz"
    assert main(["window", *paths, "--step", str(step), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    data = gzip.decompress(out.read_bytes())
    assert partial_overlaps(data) == 0
    doc = json.loads(data)
    events = doc["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    for k, path in enumerate(paths):
        cut = window_of_step(path, step)
        label = f"rank {k}"
        assert f"{label}: step {step}" in said and f"{cut.kernels} kernels" in said
        own = {p for p, n in names.items() if n.startswith(f"{label}: ")}
        assert own, names
        kernels = sorted(
            (e["name"], e["ts"]) for e in events if e.get("cat") == "kernel" and e["pid"] in own
        )
        expected = sorted((e["name"], e["ts"]) for e in _events(cut) if e.get("cat") == "kernel")
        assert kernels == expected and len(kernels) == cut.kernels > 0
    # the ranks' processes are apart: every pid belongs to one rank
    owners = [{p for p, n in names.items() if n.startswith(f"rank {k}: ")} for k in (0, 1)]
    assert not owners[0] & owners[1]
    assert {e["pid"] for e in events} <= owners[0] | owners[1]
    assert doc["traceName"] == "ranks: rank 0, rank 1"


def build_steps(path: str) -> list[int]:
    from tb_kineto_insights.analysis.trace_index import build_index

    return [int(n) for n in build_index(read_trace(path)).steps.number]


def test_window_refuses_to_overwrite_its_input(tmp_path: Path, capsys: Any) -> None:
    """Attack run: ``window $f --step 2 --out $f`` exited 0 and left only the cut."""
    src = SAMPLE_LOGS / "eff_gemm_skinny"
    trace = tmp_path / next(p.name for p in src.iterdir() if p.name.endswith(".gz"))
    trace.write_bytes(next(p for p in src.iterdir() if p.name.endswith(".gz")).read_bytes())
    before = trace.read_bytes()
    link = tmp_path / "link.json.gz"
    link.symlink_to(trace)
    for out in (trace, link):
        assert main(["window", str(trace), "--step", "2", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: --out {out}: is the input trace {trace}; writing the window there "
            "would overwrite the trace: give another file name\n"
        )
    assert trace.read_bytes() == before
    # the same file twice (as two ranks), by its name and through a link
    for twice in ([str(trace), str(trace)], [str(trace), str(link)]):
        assert main(["window", *twice, "--step", "2", "--out", str(tmp_path / "o.json")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {twice[1]}: the same trace file is given twice (also as ")
    assert not (tmp_path / "o.json").exists()
    # a directory, and a folder that does not exist: the message names --out
    assert main(["window", str(trace), "--step", "2", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: --out {tmp_path}: is a directory; give a file name (.json or .json.gz)\n"
    )
    missing = tmp_path / "no" / "o.json"
    assert main(["window", str(trace), "--step", "2", "--out", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"error: --out {missing}: cannot be written: No such file or directory\n"
    )
    # a healthy call still works
    assert main(["window", str(trace), "--step", "2", "--out", str(tmp_path / "o.json")]) == 0
    assert (tmp_path / "o.json").stat().st_size > 1000
