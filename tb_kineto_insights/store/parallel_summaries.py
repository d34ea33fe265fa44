"""The files of a log directory read and analysed at once, on every core.

:func:`summarize_spans` gives one ``(summary, None)`` or ``(None, {"type", "message"})``
per span, in the order of the spans given (file order), as soon as that span and every
span before it are done; ``diff``/``check`` (both sides at once), ``history`` and
``report`` with a cache take their span summaries from it (through
:meth:`~tb_kineto_insights.store.cached_summaries.CachedSummaries.summarize_all`).
:func:`summarize_spans_as_done` gives them as each is done, with its index: ``report``
builds and encodes each run as soon as its files are in.

How the work is shared (one budget of processes for the command):

- **One pool.** A single process pool of up to :func:`worker_count` processes (the decode
  workers' forkserver of ``trace/parallel.py``, which preloads the analysis here) runs
  everything: whole files, and the pieces of a file read piece by piece. A big file's
  per-piece parallelism and the other files' work never add up to more processes than
  cores. The command line forks that pool ahead (:func:`prestart`), right after it
  imported the analysis and before its time budget's thread starts: no server process,
  no resource tracker, and the workers share the imports' pages.
- **Largest first.** Files are ordered by their JSON size (a gzip file's ``ISIZE``
  trailer; :func:`estimated_json_bytes`), so that the last file to finish is a small one.
- **Dominant files piece by piece.** A file of at least
  :data:`~tb_kineto_insights.trace.parallel.PARALLEL_MIN_JSON_BYTES` that is larger than
  its share of the cores (the JSON of every file still to read over the processes) would
  alone outlast the others spread over the cores: it is read in this process with its
  pieces decoded by the pool (``read_trace(pool=)``) and analysed here. While it is
  analysed here, the pool takes other files (all processes but one); while it is read,
  none (the pool decodes its pieces).
- **Every other file whole in one process.** Reading a whole file in one process costs
  less CPU than cutting it into pieces and merging them, and with several files there is
  enough work to fill the cores. This process takes batches too (the largest not sent
  yet), so the pool has one process fewer than cores (less memory, one start less)
  unless a file goes piece by piece. Small files share a batch (a task's sending and
  pickling is then paid per batch), guided: a batch holds at most
  :data:`BATCH_JSON_BYTES` and at most 1/:data:`BATCH_GUIDE` of each core's share of
  the JSON still to plan, so the batches shrink to one small file each at the end and
  the processes finish together (with batches of one size throughout, one process
  would sit idle at the end while another finishes its last batch). Each pool process
  has one batch queued behind the one it runs (:data:`QUEUED_PER_PROCESS`): it starts
  the next without a round trip to this process, whose threads wait for the GIL while
  it analyses (a wait at every batch boundary otherwise). Figures:
  ``benchmarks/RESULTS.md``.
  A process that reads whole files inflates them on its one thread
  (:func:`~tb_kineto_insights.trace.source.inflate_on_this_thread`): the other cores
  are busy, a helper thread would only compete. A summary comes back as msgpack
  (``msgspec``): the same Struct, to the byte (``tests/test_parallel_summaries_real.py``
  compares the JSON report with the serial one).
- **Serial when it does not pay**: one file, fewer than two usable cores
  (``KINETO_INSIGHTS_READ_WORKERS=1`` too), under :data:`MIN_PARALLEL_JSON_BYTES` of JSON
  in all, or a process that cannot start worker processes; then each file is read here,
  one after another. A task whose process died or whose pool broke is done again here
  (as the reader does with a failed piece), so the result never depends on the pool.

With a cache (``cache_location``), the process that summarises a file stores its entry
(with the timelines, as ``index`` does), so the summaries do not travel twice; the
caller looks the cache up before
(:class:`~tb_kineto_insights.store.cached_summaries.CachedSummaries`).
The measurements behind the thresholds are in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import os
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from tb_kineto_insights.analysis.thresholds import Thresholds
from tb_kineto_insights.logdir.discovery import Span
from tb_kineto_insights.schema import Summary
from tb_kineto_insights.summary import SpanFailed, SpanOk, SpanResult
from tb_kineto_insights.trace import parallel
from tb_kineto_insights.trace.local_paths import local_path
from tb_kineto_insights.trace.source import inflate_on_this_thread

if TYPE_CHECKING:
    import threading
    from concurrent.futures import Executor, Future

    from tb_kineto_insights.store.cache import Identity

# logging, threading and concurrent.futures are imported where a pool is used: a report
# of one small file never needs them (tests/test_startup_imports.py).


#: Least JSON (estimated, all files together) read with a pool: below it the pool's
#: start (a forkserver importing the analysis, mostly while this process imports) is
#: not paid back. An estimate: at one core's rate of reading and analysing, 24 MiB is
#: about as much work to share as the pool's start costs (the figures behind it are in
#: ``benchmarks/RESULTS.md``).
MIN_PARALLEL_JSON_BYTES = 24 * 1024 * 1024
#: Files are sent to the pool in batches of at most this much JSON (estimated), largest
#: first: a file this large is a task of its own, small files share one.
BATCH_JSON_BYTES = 8 * 1024 * 1024
#: A batch holds at most 1/BATCH_GUIDE of each core's share of the JSON still to plan
#: (guided scheduling): the last batches are single small files.
BATCH_GUIDE = 2
#: Batches in flight per pool process while this process takes batches too: the one it
#: runs and one queued behind it.
QUEUED_PER_PROCESS = 2
#: At most this many files in one batch.
BATCH_MAX_FILES = 64
#: The most deflate can shrink data (RFC 1951: a 258-byte match in about two bits): a
#: gzip trailer claiming more than this many times the file's size is no trailer.
MAX_DEFLATE_RATIO = 1032
#: Modules the forkserver imports before it forks a worker that summarises whole files.
PRELOAD = ("tb_kineto_insights.summary", __name__)
_GZIP_MAGIC = b"\x1f\x8b"
_ISIZE = struct.Struct("<I")


def identity_of(span: Span, root: str = "") -> Identity:
    """The cache identity of a listed span: what discovery saw (for a local file: its
    target's device, inode, size and mtime_ns). ``root``: the log directory the file
    must lie in when opened (the plugin's rule); none for the command line, which reads
    the files it is given."""
    from tb_kineto_insights.store.cache import Identity  # costly imports: only here

    return Identity(
        span.path,
        span.size_bytes,
        span.mtime,
        device=span.device,
        inode=span.inode,
        mtime_ns=span.mtime_ns,
        root=root,
        version=span.version,
    )


def changed_while_read(ident: Identity) -> str | None:
    """For an object listed with a version (ETag/VersionId): a message when its version
    is no longer the listed one after the read, else None (the plugin's workers and the
    CLI's cache path both ask before storing a summary). The summary of bytes that
    may be another version's is then neither stored under the listed version's key nor
    served (an object overwritten while it is read would otherwise have the new bytes'
    summary cached under the old key); the next scan lists the new version."""
    if not ident.version or "://" not in ident.path:
        return None
    from tb_kineto_insights.logdir.discovery import object_version

    try:
        now = object_version(ident.path)
    except Exception as exc:  # noqa: BLE001 (a driver's own error type)
        return f"{ident.path}: cannot check the object's version after reading it: {exc}"
    if now == ident.version:
        return None
    return (
        f"{ident.path}: the object changed while it was read (listed version "
        f"{ident.version}, now {now or 'none'}); not cached, read again at the next scan"
    )


def estimated_json_bytes(span: Span) -> int:
    """The span's uncompressed JSON size, for ordering and planning only: a local gzip
    file's ``ISIZE`` trailer (the size modulo 2^32), a local plain file's size, and for
    a URL the stored size (times the ratio for a ``.gz`` name). A trailer below the
    stored size (a file over 4 GiB) or above :data:`MAX_DEFLATE_RATIO` times it (no
    trailer: a file still being written, cut short, whose last four bytes are deflate
    data: a 15 kB file may claim 2.96 GB, which would start a pool for a log dir of two
    tiny files) is taken as :data:`~tb_kineto_insights.trace.parallel.GZIP_RATIO_ESTIMATE`
    times the stored size. Raises nothing (an unreadable file: its listed size; its read
    gives the error)."""
    size = max(0, span.size_bytes)
    local = local_path(span.path)
    if local is None:
        return size * (parallel.GZIP_RATIO_ESTIMATE if span.path.endswith(".gz") else 1)
    try:
        with open(local, "rb") as fh:
            if fh.read(2) != _GZIP_MAGIC:
                return size
            fh.seek(-_ISIZE.size, os.SEEK_END)
            (isize,) = _ISIZE.unpack(fh.read(_ISIZE.size))
    except (OSError, struct.error):
        return size
    if size <= isize <= size * MAX_DEFLATE_RATIO:
        return isize
    return size * parallel.GZIP_RATIO_ESTIMATE


def worker_count(total_json_bytes: int, files: int) -> int:
    """Processes for ``files`` files of ``total_json_bytes`` JSON in all: 0 = read them
    here, one after another (one file, under :data:`MIN_PARALLEL_JSON_BYTES`, or
    :func:`~tb_kineto_insights.trace.parallel.read_workers` says no pool: fewer than two
    cores, ``KINETO_INSIGHTS_READ_WORKERS=1``, a process that cannot have children)."""
    if files < 2 or total_json_bytes < MIN_PARALLEL_JSON_BYTES:
        mb = total_json_bytes / 1e6
        parallel.note(f"pool: {files} file(s), {mb:.0f} MB of JSON in all: one process")
        return 0
    return parallel.pool_workers()


@dataclass(frozen=True)
class FileTask:
    """What a process needs to summarise one file: the span, and with a cache its
    identity and entry key (``store.cache``; the entry is stored by that process)."""

    span: Span
    key: str | None = None


@dataclass(frozen=True)
class Settings:
    """The analysis settings every file of one call shares (pickled once per batch)."""

    max_json_bytes: int
    thresholds: Thresholds
    cache_location: str | None = None
    cache_settings: str = ""
    #: this process's environment when the call began (storage credentials, endpoints):
    #: a worker reads with it, not with the forkserver's, which may be older
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))


#: One file's outcome as it travels back from a pool process (:func:`summarize_batch`):
#: ``("summary", msgpack bytes, None)``, ``("object", the Summary itself, None)`` (what
#: msgpack cannot hold) or ``("error", None, SpanFailed)``; the fourth item is a
#: cache-store warning.
Outcome = tuple[str, bytes | Summary | None, SpanFailed | None, str | None]


def summarize_one(
    task: FileTask,
    settings: Settings,
    *,
    workers: int | None = None,
    pool: Executor | None = None,
    after_read: Callable[[], None] | None = None,
) -> tuple[SpanResult, str | None]:
    """Read and analyse one file, storing its cache entry when
    ``settings.cache_location`` is set. With ``pool`` (and ``workers``, its size) its
    pieces are decoded there and ``after_read()`` is called between the read and the
    analysis; ``workers=1`` without a pool: read serially here; neither: through
    :func:`tb_kineto_insights.summary.summarize_file` (the reader decides on a pool of
    its own). Never raises for the file's sake. Returns ``(result, store_warning)``:
    :class:`~tb_kineto_insights.summary.SpanOk` or the
    :class:`~tb_kineto_insights.summary.SpanFailed` of
    :func:`~tb_kineto_insights.summary.span_failed`; only a cacheable failure (about the
    file's content) is stored (an I/O error is retried next time)."""
    from tb_kineto_insights import summary as summary_module
    from tb_kineto_insights.trace.reader import read_trace

    path = task.span.path
    with_timeline = settings.cache_location is not None
    started = time.perf_counter()
    try:
        if pool is None and workers is None:  # the façade's calls (what tests count)
            summarize_file = (
                summary_module.summarize_file_with_timeline
                if with_timeline
                else summary_module.summarize_file
            )
            got = summarize_file(
                path, max_json_bytes=settings.max_json_bytes, thresholds=settings.thresholds
            )
            summary, store = got if isinstance(got, tuple) else (got, None)
        else:
            trace = read_trace(
                path, max_json_bytes=settings.max_json_bytes, workers=workers, pool=pool
            )
            if after_read is not None:
                after_read()
            if with_timeline:
                summary, store = summary_module.summarize_trace_with_timeline(
                    trace, settings.thresholds
                )
            else:
                summary, store = summary_module.summarize_trace(trace, settings.thresholds), None
            del trace
    except summary_module.SPAN_ERRORS as exc:
        failed = summary_module.span_failed(exc, path)
        if not failed.cacheable:
            return failed, None
        return failed, _store(task, settings, error=failed, started=started)
    # (an object listed with a version only: identity_of imports the cache's machinery)
    versioned = bool(task.span.version) and "://" in path
    changed = changed_while_read(identity_of(task.span)) if versioned else None
    if changed is not None:  # another version's bytes: neither stored nor answered
        return SpanFailed(summary_module.FAILED_IO, "TraceIOError", changed, False), None
    warning = None
    if with_timeline:
        warning = _store(task, settings, summary=summary, timeline=store, started=started)
    return SpanOk(summary), warning


def _store(
    task: FileTask,
    settings: Settings,
    *,
    summary: Summary | None = None,
    timeline: Any = None,
    error: SpanFailed | None = None,
    started: float,
) -> str | None:
    """Write the file's cache entry (as ``CachedSummaries`` does); the warning when the
    cache cannot be written, else None."""
    if settings.cache_location is None:
        return None
    from tb_kineto_insights.analysis.timeline_format import encode_store
    from tb_kineto_insights.store.cache import DiskCache, entry_bytes

    ident = identity_of(task.span)
    try:
        data = entry_bytes(
            ident,
            settings.cache_settings,
            summary=summary,
            error=error,
            elapsed_s=time.perf_counter() - started,
            key=task.key,
            timeline=None if timeline is None else encode_store(timeline),
        )
        DiskCache(settings.cache_location, settings.cache_settings).store_entry(
            ident, data, is_error=error is not None, key=task.key, summary=summary
        )
    except (OSError, ValueError, ImportError) as exc:
        return f"cannot write the cache {settings.cache_location} ({exc})"
    return None


def summarize_batch(tasks: list[FileTask], settings: Settings) -> list[Outcome]:
    """The body of a pool task: each file of the batch summarised in this process
    (:func:`summarize_one`) under the caller's environment, its summary sent back as
    msgpack, or as the object itself (pickled) when msgpack cannot hold it: a lone
    surrogate (a log dir or file name that is not UTF-8) or an int above 2**64 (in a
    trace's metadata) made the whole batch fail and be read again by the caller, with a
    warning. (A ``\\udcff`` escape in an event's name never gets this far: the reader
    drops that event as damage.)"""
    if os.environ != settings.environ:
        os.environ.clear()
        os.environ.update(settings.environ)
    out: list[Outcome] = []
    with inflate_on_this_thread():  # every core reads a file: no helper thread
        for task in tasks:
            result, warning = summarize_one(task, settings)
            if isinstance(result, SpanFailed):
                out.append(("error", None, result, warning))
                continue
            try:
                out.append(("summary", msgspec.msgpack.encode(result.summary), None, warning))
            except (msgspec.EncodeError, UnicodeEncodeError, TypeError, OverflowError):
                out.append(("object", result.summary, None, warning))
    return out


_SUMMARY_DECODER: msgspec.msgpack.Decoder[Summary] | None = None


def _decoded(outcome: Outcome) -> SpanResult:
    global _SUMMARY_DECODER
    kind, data, error, _ = outcome
    if isinstance(data, Summary):  # ("object": what msgpack could not hold)
        return SpanOk(data)
    if kind == "summary" and data is not None:
        if _SUMMARY_DECODER is None:
            _SUMMARY_DECODER = msgspec.msgpack.Decoder(Summary)
        return SpanOk(_SUMMARY_DECODER.decode(data))
    if error is None:  # never: an "error" outcome carries its SpanFailed
        raise ValueError(f"a pool outcome of kind {kind!r} without its result")
    return error


@dataclass
class _Batch:
    indices: list[int]
    future: Future[list[Outcome]] | None = None
    failed: BaseException | None = None
    collected: bool = False  # its outcomes given (or it was done in this process)


def _threading() -> Any:
    import threading

    return threading


@dataclass
class _Feeder:
    """Sends batches to the pool from a thread of its own, at most ``limit`` in flight
    (set by the caller: 0 while this process reads a file piece by piece on the pool,
    ``workers - 1`` else: this process analyses a file or takes batches itself,
    :meth:`take_next`), so that one process runs per core."""

    pool: Executor
    batches: list[_Batch]
    tasks: list[FileTask]
    settings: Settings
    limit: int = 0
    in_flight: int = 0
    next_batch: int = 0
    stopped: bool = False
    cond: threading.Condition = field(default_factory=lambda: _threading().Condition())

    def start(self) -> None:
        _threading().Thread(target=self._run, name="kineto-insights-feeder", daemon=True).start()

    def set_limit(self, limit: int) -> None:
        with self.cond:
            self.limit = limit
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def _done(self, _: Future[Any]) -> None:
        with self.cond:
            self.in_flight -= 1
            self.cond.notify_all()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.stopped and not (
                    self.next_batch < len(self.batches) and self.in_flight < self.limit
                ):
                    self.cond.wait()
                if self.stopped:
                    return
                batch = self.batches[self.next_batch]
                self.next_batch += 1  # claimed here, under the lock: take_next skips it
                self.in_flight += 1
            try:
                future = self.pool.submit(
                    summarize_batch, [self.tasks[i] for i in batch.indices], self.settings
                )
            except Exception as exc:  # noqa: BLE001 (a broken pool: done serially later)
                with self.cond:
                    batch.failed = exc
                    self.in_flight -= 1
                    self.cond.notify_all()
                continue
            with self.cond:
                batch.future = future
                self.cond.notify_all()
            future.add_done_callback(self._done)

    def take_next(self) -> _Batch | None:
        """The next batch not sent yet, for the caller to do itself (never sent then);
        None when every batch was sent or taken."""
        with self.cond:
            if self.next_batch >= len(self.batches):
                return None
            batch = self.batches[self.next_batch]
            self.next_batch += 1
            self.cond.notify_all()
            return batch

    def wait_submitted(self, batch: _Batch) -> None:
        """Wait until ``batch`` was sent (or failed to be)."""
        with self.cond:
            while batch.future is None and batch.failed is None and not self.stopped:
                self.cond.wait()


def plan(sizes: Sequence[int], workers: int) -> tuple[list[int], list[list[int]]]:
    """Which files are read here piece by piece, largest first, and the batches of the
    others for the pool, largest first (indices into ``sizes``, estimated JSON bytes).

    A file is read piece by piece when it is at least
    :data:`~tb_kineto_insights.trace.parallel.PARALLEL_MIN_JSON_BYTES` and larger than
    the JSON still to read (itself and every smaller file) over ``workers``: alone in one
    process it would outlast the rest spread over the cores. Batches: consecutive files
    (largest first) until one holds its target or :data:`BATCH_MAX_FILES`; the target
    is :data:`BATCH_JSON_BYTES`, or less near the end: the JSON of the files still to
    batch (this one's included) over ``BATCH_GUIDE * workers``.
    """
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    remaining = sum(sizes)
    here: list[int] = []
    rest: list[int] = []
    for i in order:
        big = sizes[i] >= parallel.PARALLEL_MIN_JSON_BYTES
        if not rest and big and sizes[i] * workers > remaining:
            here.append(i)
        else:
            rest.append(i)
        remaining -= sizes[i]
    batches: list[list[int]] = []
    current: list[int] = []
    current_bytes = target = 0
    to_batch = sum(sizes[i] for i in rest)
    for i in rest:
        if not current:
            target = min(BATCH_JSON_BYTES, to_batch // (BATCH_GUIDE * max(1, workers)))
        current.append(i)
        current_bytes += sizes[i]
        to_batch -= sizes[i]
        if current_bytes >= target or len(current) >= BATCH_MAX_FILES:
            batches.append(current)
            current, current_bytes = [], 0
    if current:
        batches.append(current)
    return here, batches


def prestart(spans: Sequence[Span]) -> bool:
    """Before a command summarises ``spans`` with :func:`summarize_spans` (``report
    LOGDIR``, ``diff``/``check`` of two folders): start its pool's processes now. When
    the plan (:func:`plan`) reads no file piece by piece, the analysis is imported here
    and the pool's processes (:func:`pool_size`) are forked
    (:func:`~tb_kineto_insights.trace.parallel.prestart_pool`: no server process, less
    memory); with such a file, or more processes than cores, the
    forkserver is started (:func:`~tb_kineto_insights.trace.parallel.warm_up_server`),
    which starts them as the work needs them, while this process imports. Returns
    whether anything started (nothing for files too few or too small for a pool,
    :func:`worker_count`). Call it while this process runs one thread. Raises nothing."""
    sizes = [estimated_json_bytes(s) for s in spans]
    workers = worker_count(sum(sizes), len(sizes))
    if not workers:
        return False
    here, batches = plan(sizes, workers)
    size = pool_size(workers, bool(here), len(batches))
    # more processes than cores (KINETO_INSIGHTS_READ_WORKERS above them): the server
    # starts them as the work needs them, a fork of each would import the analysis
    if here or size >= parallel.usable_cores():
        return parallel.warm_up_server(PRELOAD)
    return parallel.prestart_pool(size, PRELOAD)


def pool_size(workers: int, piece_by_piece: bool, batches: int) -> int:
    """Processes of the pool for ``workers`` cores: one per core while a file is read
    piece by piece (its pieces need a decoder per core), else one fewer (this process
    takes batches too) and no more than the ``batches`` less the one this process takes
    first (a pool forked ahead starts every process at once: with
    ``KINETO_INSIGHTS_READ_WORKERS=999`` it forked 998)."""
    if piece_by_piece:
        return workers
    return max(1, min(workers - 1, batches - 1))


def summarize_spans(
    tasks: Sequence[FileTask], settings: Settings
) -> Iterator[tuple[SpanResult, str | None]]:
    """Summaries of ``tasks``' files, in their order, each as soon as it and every one
    before it are done: ``(SpanOk | SpanFailed, store_warning)``
    (see the module docstring for how the work is shared; :func:`summarize_spans_as_done`
    gives them as they come). One file's error never stops the others. Raises nothing
    for a file's sake."""
    done: dict[int, tuple[SpanResult, str | None]] = {}
    next_out = 0
    for i, result in summarize_spans_as_done(tasks, settings):
        done[i] = result
        while next_out in done:
            yield done.pop(next_out)
            next_out += 1


def summarize_spans_as_done(
    tasks: Sequence[FileTask], settings: Settings
) -> Iterator[tuple[int, tuple[SpanResult, str | None]]]:
    """:func:`summarize_spans`' results as each file is done: ``(index into tasks,
    result)``, every index once, in no set order (file order when read serially): what
    this process did as it finishes it, the pool's batches as this process finds them
    done between its own files (their summaries decoded while the pool still works),
    the last ones as they end. ``report`` builds each run as its files are in, so that
    the work after the last file is that of the last run only."""
    tasks = list(tasks)
    sizes = [estimated_json_bytes(t.span) for t in tasks]
    workers = worker_count(sum(sizes), len(tasks))
    here, batch_indices = plan(sizes, workers) if workers else ([], [])
    # this process takes batches too: one process fewer in the pool (its memory and its
    # start), unless a file goes piece by piece (its pieces need a decoder per core)
    size = pool_size(workers, bool(here), len(batch_indices))
    pool = parallel.start_pool(size, PRELOAD) if workers else None
    if pool is None:
        for i, task in enumerate(tasks):
            yield i, summarize_one(task, settings)
        return
    try:
        yield from _summarize_on_pool(tasks, settings, pool, workers, here, batch_indices)
    finally:
        # waiting for the processes to end (a few ms): with wait=False, Python 3.11's
        # exit may write to the pool's closed wake-up pipe and print an OSError
        # traceback (a race of concurrent.futures)
        pool.shutdown(wait=True, cancel_futures=True)


def _summarize_on_pool(
    tasks: list[FileTask],
    settings: Settings,
    pool: Executor,
    workers: int,
    here: list[int],
    batch_indices: list[list[int]],
) -> Iterator[tuple[int, tuple[SpanResult, str | None]]]:
    batches = [_Batch(indices) for indices in batch_indices]
    feeder = _Feeder(pool, batches, tasks, settings)
    # without a dominant file, this process takes the largest batch itself, before the
    # feeder sends any: the pool's process may still be starting (a forkserver that
    # imports the analysis), and the largest task must not wait for it
    first = None if here else feeder.take_next()
    feeder.start()
    todo_here = deque(here)
    try:
        if not todo_here:
            # one batch running per pool process (and this process: one per core), one
            # queued behind it (a pool of workers - 1 processes: none runs it early)
            feeder.set_limit(QUEUED_PER_PROCESS * (workers - 1))
        while True:
            for batch in batches:  # what the pool finished meanwhile
                if not batch.collected and batch.future is not None and batch.future.done():
                    yield from _collected(batch, feeder, tasks, settings)
            if todo_here:  # the dominant files first, here, their pieces on the pool
                i = todo_here.popleft()
                result = _summarize_here(tasks[i], settings, pool, workers, feeder)
                feeder.set_limit(workers - 1 if not todo_here else 0)
                yield i, result
                continue
            taken, first = first or feeder.take_next(), None
            if taken is not None:  # the largest batch not sent yet, here
                taken.collected = True
                for j in taken.indices:
                    with inflate_on_this_thread():  # serially: the pool has the other cores
                        result = summarize_one(tasks[j], settings, workers=1)
                    yield j, result
                continue
            left = [b for b in batches if not b.collected]  # every one sent: wait for them
            if not left:
                return
            yield from _collected(left[0], feeder, tasks, settings)
    finally:
        feeder.stop()
        for batch in batches:
            if batch.future is not None:
                batch.future.cancel()


def _collected(
    batch: _Batch, feeder: _Feeder, tasks: list[FileTask], settings: Settings
) -> Iterator[tuple[int, tuple[SpanResult, str | None]]]:
    """A batch sent to the pool, its outcomes (:func:`_batch_outcomes`) by file index."""
    batch.collected = True
    outcomes = _batch_outcomes(batch, feeder, tasks, settings)
    batch.future = None  # its result, the summaries' msgpack: decoded, let go
    yield from zip(batch.indices, outcomes, strict=True)


def _summarize_here(
    task: FileTask, settings: Settings, pool: Executor, workers: int, feeder: _Feeder
) -> tuple[SpanResult, str | None]:
    """A dominant file in this process: read with its pieces on the pool (no batch is
    sent meanwhile), then analysed here while the pool takes ``workers - 1`` batches."""
    feeder.set_limit(0)
    return summarize_one(
        task,
        settings,
        workers=workers,
        pool=pool,
        after_read=lambda: feeder.set_limit(max(1, workers - 1)),
    )


def _batch_outcomes(
    batch: _Batch, feeder: _Feeder, tasks: list[FileTask], settings: Settings
) -> list[tuple[SpanResult, str | None]]:
    """A batch's outcomes, waiting for it; done here, serially, when its process died or
    the pool broke (logged)."""
    feeder.wait_submitted(batch)
    problem: BaseException | None = batch.failed
    if batch.future is not None:
        try:
            return [(_decoded(o), o[3]) for o in batch.future.result()]
        except Exception as exc:  # noqa: BLE001 (a dead worker, a broken pool)
            problem = exc
    import logging

    logging.getLogger(__name__).warning(
        "Kineto Insights: a worker process failed (%s: %s); reading %d file(s) here",
        type(problem).__name__,
        problem,
        len(batch.indices),
    )
    return [summarize_one(tasks[i], settings) for i in batch.indices]
