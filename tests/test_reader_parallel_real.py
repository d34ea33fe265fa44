"""The tests of ``test_reader_parallel.py``'s subject that read real traces
(``sample_logs/``, ``../shared``): ``make quick`` leaves out a module named
``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import REPO, SAMPLE_LOGS, write_trace
from test_reader_parallel import SMALL_BLOCK, _assert_same, merged

from tb_kineto_insights.trace import parallel, reader
from tb_kineto_insights.trace.reader import read_trace

#: Fixtures of test_reader_parallel.py that these tests take: pytest looks them up
#: among the names of the test's module (this use of them keeps the import).
FIXTURES = (merged,)


_NAME_KEY = re.compile(rb'"name":\s*"')


@pytest.fixture(scope="module")
def scaled_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sample_logs/transformer_eager repeated twice (about 25 MB of JSON)."""
    src = next((SAMPLE_LOGS / "transformer_eager").glob("*.json.gz"))
    out = tmp_path_factory.mktemp("scaled") / "te_x2.json.gz"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "scale_trace.py"), str(src), "-o", str(out)]
        + ["--repeat", "2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_scaled_trace_parallel_equals_serial(
    scaled_sample: Path, monkeypatch: pytest.MonkeyPatch, merged: list[int]
) -> None:
    """The automatic path (threshold forced to 0, 2 cores from the variable) gives the
    serial result, column by column, on a real exact-mode trace of many pieces."""
    serial = read_trace(str(scaled_sample), workers=1, block_bytes=SMALL_BLOCK)
    assert serial.health.exact_ns_timestamps
    assert serial.health.json_bytes > 40 * SMALL_BLOCK  # many pieces, several per worker
    assert len(serial.tables["kernel"]) > 5_000
    monkeypatch.setattr(parallel, "PARALLEL_MIN_JSON_BYTES", 0)
    monkeypatch.setenv(parallel.WORKERS_ENV, "2")
    assert parallel.read_workers(1) == 2
    par = read_trace(str(scaled_sample), block_bytes=SMALL_BLOCK)
    _assert_same(serial, par)
    assert len(merged) > 20  # the pieces were built in workers
    # 0.95 before the parent decoded pieces while its workers start: the first piece
    # fails (string pids: serial path), and the pieces held after it, now up to
    # HELD_PER_WORKER per worker instead of IN_FLIGHT_PER_WORKER, are read again
    # serially (measured: 0.917-0.93 of the events merged, 0.953 before)
    assert sum(merged) > 0.88 * serial.health.event_count


def test_float_timestamps_parallel_equals_serial(shared_traces: Path, merged: list[int]) -> None:
    path = shared_traces / "hta_df_index_resolver" / "df_index_resolver.json.gz"
    serial = read_trace(str(path), workers=1, block_bytes=SMALL_BLOCK)
    assert not serial.health.exact_ns_timestamps
    _assert_same(serial, read_trace(str(path), workers=3, block_bytes=SMALL_BLOCK))
    assert len(merged) > 10


def _plant_damage(data: bytes) -> bytes:
    """Damage at known fractions of the file: an unescaped quote in a name, a deleted
    closing brace, junk bytes, and a 300 kB string full of ``},{`` (a piece cut inside
    a string: the serial reader waits for more bytes)."""
    b = bytearray(data)
    n = len(b)
    for frac, kind in ((0.2, "quote"), (0.35, "brace"), (0.5, "junk"), (0.65, "cut")):
        found = _NAME_KEY.search(b, int(n * frac))
        assert found is not None
        i, j = found.start(), found.end()  # the key, the name's first character
        if kind == "quote":
            b[j:j] = b'a"b'
        elif kind == "brace":
            del b[b.find(b"}", i)]
        elif kind == "junk":
            b[i:i] = b"\x00\x01garbage"
        else:
            b[j:j] = b"x},{y" * 60_000
    return bytes(b)


def test_damaged_trace_parallel_equals_serial(
    scaled_sample: Path, tmp_path: Path, merged: list[int]
) -> None:
    """Pieces that fail in a worker are read again serially: the same events, repairs,
    damage regions and byte offsets as the serial reader."""
    path = write_trace(
        tmp_path / "damaged.json", text=_plant_damage(gzip.decompress(scaled_sample.read_bytes()))
    )
    serial = read_trace(str(path), workers=1, block_bytes=SMALL_BLOCK)
    assert serial.health.damaged_regions >= 2
    assert serial.health.lost_events >= 2
    par = read_trace(str(path), workers=2, block_bytes=SMALL_BLOCK)
    _assert_same(serial, par)
    assert len(merged) > 20  # intact pieces still went through workers
    offsets = [d["offset"] for d in par.health.damage]
    assert offsets == [d["offset"] for d in serial.health.damage]


def test_worker_errors_fall_back_to_serial(
    scaled_sample: Path, monkeypatch: pytest.MonkeyPatch, merged: list[int]
) -> None:
    """A task that raises in its worker (a worker that died) and a pool that breaks
    between tasks: the blocks from that task on are read serially, same result. The
    pool is a thread pool here so that the failures can be planted."""
    serial = read_trace(str(scaled_sample), workers=1, block_bytes=SMALL_BLOCK)
    real = reader.build_pieces
    calls: list[int] = []

    def flaky(tail: bytes, blocks: list[bytes], exact: bool) -> object:
        calls.append(len(blocks))
        if len(calls) == 3:
            raise OSError("worker died")
        return real(tail, blocks, exact)

    monkeypatch.setattr(reader, "decode_in_worker", flaky)
    monkeypatch.setattr(parallel, "start_pool", lambda workers: ThreadPoolExecutor(workers))
    _assert_same(serial, read_trace(str(scaled_sample), workers=2, block_bytes=SMALL_BLOCK))
    assert len(calls) > 10 and len(merged) > 5  # workers before and after the failure
    first_run = len(merged)

    class Breaking(ThreadPoolExecutor):
        def submit(self, *args: object, **kwargs: object) -> Future:  # type: ignore[override]
            if len(calls) >= 6:
                raise RuntimeError("pool broke")
            return super().submit(*args, **kwargs)  # type: ignore[arg-type]

    calls.clear()
    monkeypatch.setattr(parallel, "start_pool", lambda workers: Breaking(workers))
    _assert_same(serial, read_trace(str(scaled_sample), workers=2, block_bytes=SMALL_BLOCK))
    assert 0 < len(merged) - first_run <= 10  # pieces before the break came from workers


def test_unguarded_script_reads_once_and_says_why(tmp_path: Path) -> None:
    """A script without ``if __name__ == "__main__":`` that reads a trace with decode
    workers: each worker imports the main module and reaches the read while it does, which
    raises (BOOTSTRAP_MESSAGE on stderr); the pool breaks and the parent reads serially.
    The script's read runs once (one ``done`` line, not one per worker as before) and its
    result is the serial read's."""
    trace = next((SAMPLE_LOGS / "transformer_eager").glob("*.json.gz"))
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from tb_kineto_insights.trace.reader import read_trace\n"
        f"t = read_trace({str(trace)!r}, workers=2)\n"
        "print('done', t.kernels.start_ns.size, int(t.kernels.start_ns.sum()))\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    serial = read_trace(str(trace), workers=1)
    want = f"done {serial.kernels.start_ns.size} {int(serial.kernels.start_ns.sum())}"
    assert out.stdout.splitlines() == [want]
    assert parallel.BOOTSTRAP_MESSAGE in out.stderr
    assert "reading on serially" in out.stderr


def test_parent_decodes_pieces_while_the_workers_start(
    scaled_sample: Path, monkeypatch: pytest.MonkeyPatch, merged: list[int]
) -> None:
    """Until a worker has decoded a piece, the parent decodes pieces itself once
    IN_FLIGHT_PER_WORKER pieces per worker wait; they are merged in file order like
    the workers' (same result as the serial read). A thread pool whose tasks wait on an
    event stands for workers that are still starting."""
    import threading

    serial = read_trace(str(scaled_sample), workers=1, block_bytes=SMALL_BLOCK)
    here: list[int] = []
    real_here = reader._decoded_here

    def counted(tail: bytes, blocks: list[bytes], exact: bool) -> Future:
        here.append(len(blocks))
        return real_here(tail, blocks, exact)

    started = threading.Event()
    real = reader.build_pieces

    def slow_start(tail: bytes, blocks: list[bytes], exact: bool) -> object:
        started.wait(timeout=60)
        return real(tail, blocks, exact)

    monkeypatch.setattr(reader, "_decoded_here", counted)
    monkeypatch.setattr(reader, "decode_in_worker", slow_start)
    monkeypatch.setattr(parallel, "start_pool", lambda workers: ThreadPoolExecutor(workers))
    monkeypatch.setattr(
        parallel, "HELD_PER_WORKER", parallel.IN_FLIGHT_PER_WORKER + 3
    )  # 3 pieces a worker decoded here before the parent waits for the oldest

    def release() -> None:  # once the parent has filled what it may hold
        while len(here) < 6:
            threading.Event().wait(0.01)
        started.set()

    threading.Thread(target=release, daemon=True).start()
    par = read_trace(str(scaled_sample), workers=2, block_bytes=SMALL_BLOCK)
    _assert_same(serial, par)
    # 2 workers x 4 pieces sent, then 2 x 3 more decoded here before the parent waited,
    # and the last group (less than PIECE_BYTES), decoded here while the workers end
    assert len(here) == 7
    assert here[-1] < 3 <= min(here[:6])
    assert len(merged) > 20
