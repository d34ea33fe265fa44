"""The plugin's settings, in one object: each from the constructor's argument, else its
TensorBoard flag (``--kineto_insights_*``), else its environment variable
(``KINETO_INSIGHTS_*``), else its default.

The log directories served: ``--logdir``, else each ``--logdir_spec`` entry
(``name:path``, a bare path, or a URL: TensorBoard's own parsing rule); a local one as
its real path (a ``file://`` URL too, so that its files are opened as local files under
the containment check), other URLs as given.
"""

from __future__ import annotations

import logging
import os
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tb_kineto_insights.logdir.links import follow_roots
from tb_kineto_insights.logdir.watch import watch_from_env
from tb_kineto_insights.service.worker_pool import (
    LoadDeadline,
    LoadMemoryCap,
    load_deadline_from_env,
    load_memory_cap_from_env,
    workers_from_env,
)
from tb_kineto_insights.store.cache import (
    CACHE_DIR_ENV,
    DiskCache,
    cache_dir_from_env,
    encode_json,
)
from tb_kineto_insights.store.seal import current_key, use_key_file
from tb_kineto_insights.store.settings import seconds_from_env
from tb_kineto_insights.trace.local_paths import FileHostError, without_local_host

logger = logging.getLogger(__name__)

#: Environment variable: seconds between re-scans of the log directory.
RESCAN_ENV = "KINETO_INSIGHTS_RESCAN_S"
#: Environment variable: ``0`` / ``false`` / ``no`` turns background preloading off.
PRELOAD_ENV = "KINETO_INSIGHTS_PRELOAD"
DEFAULT_RESCAN_S = 30.0
#: Perfetto UI, where "Open in Perfetto" sends a step's window.
DEFAULT_PERFETTO_URL = "https://ui.perfetto.dev"
#: Environment variable: Perfetto UI's address (the flag wins).
PERFETTO_URL_ENV = "KINETO_INSIGHTS_PERFETTO_URL"
# TensorBoard's own rule for `--logdir_spec` entries (name:path, URL, or bare path).
URL = re.compile(r"[a-zA-Z][0-9a-zA-Z.]*://.*")
_FALSE = frozenset({"0", "false", "no", "off"})


def rescan_interval_from_env(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between re-scans from ``KINETO_INSIGHTS_RESCAN_S``; the default (30)
    when unset, and with a warning when not a finite number ≥ 0."""
    env = os.environ if environ is None else environ
    return seconds_from_env(env, RESCAN_ENV, DEFAULT_RESCAN_S)


def preload_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``KINETO_INSIGHTS_PRELOAD`` is ``0``, ``false``, ``no`` or ``off``."""
    raw = (os.environ if environ is None else environ).get(PRELOAD_ENV, "")
    return raw.strip().lower() not in _FALSE


def perfetto_url_from(flag: str | None, environ: Mapping[str, str] | None = None) -> str:
    """Perfetto UI's address: the flag ``--kineto_insights_perfetto_url``, else
    ``KINETO_INSIGHTS_PERFETTO_URL``, else :data:`DEFAULT_PERFETTO_URL` (a self-hosted
    or offline copy of the UI for machines without the internet)."""
    env = os.environ if environ is None else environ
    value = (flag or env.get(PERFETTO_URL_ENV) or "").strip()
    return value or DEFAULT_PERFETTO_URL


@dataclass(frozen=True)
class LogdirSource:
    """One log directory; its runs are named ``name/run`` (just ``name`` for files at its
    top) when ``name`` is set, as TensorBoard names runs of ``--logdir_spec`` groups."""

    name: str | None
    path: str


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``s3://…``), by TensorBoard's rule."""
    return URL.match(path) is not None


def _normalise_path(path: str) -> str:
    """A local log directory as its real path (a ``file://`` URL too, so that its files
    are opened as local files, under the containment check; ``file://localhost/x`` is
    ``/x``); other URLs as given, and so is a ``file://`` URL of another host, which the
    listing then refuses by name (``discovery.open_fs``): its host was dropped, and
    ``file://logs`` served ``/``."""
    if path.startswith("file://") and "::" not in path:
        try:
            path = without_local_host(path)
        except FileHostError:
            return path
        path = urllib.parse.unquote(urllib.parse.urlsplit(path).path) or "/"
    if not is_url(path):
        return os.path.realpath(os.path.expanduser(path))
    return path


def logdir_sources(context: Any) -> list[LogdirSource]:
    """The log directories to serve: ``--logdir``, else each ``--logdir_spec`` entry
    (``name:path``, a bare path, or a URL; TensorBoard's own parsing rule)."""
    logdir = getattr(context, "logdir", None)
    if logdir:
        return [LogdirSource(None, _normalise_path(str(logdir)))]
    spec = str(getattr(getattr(context, "flags", None), "logdir_spec", "") or "")
    out: list[LogdirSource] = []
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name: str | None = None
        path = entry
        if (
            not is_url(entry)
            and ":" in entry
            and not entry.startswith("/")
            and not os.path.splitdrive(entry)[0]
        ):
            name, _, path = entry.partition(":")
        out.append(LogdirSource(name or None, _normalise_path(path)))
    return out


def flag(context: Any, name: str) -> Any:
    """TensorBoard flag ``name`` of ``context``, None when absent."""
    return getattr(getattr(context, "flags", None), name, None)


def index_root(sources: list[LogdirSource]) -> str:
    """The name of the log directories in the headline index: one log directory as the
    command line names it (its absolute path, a URL as given), so the two share the
    index; several as their JSON list."""
    paths = [src.path for src in sources]
    if len(paths) == 1:
        return paths[0] if is_url(paths[0]) else os.path.abspath(paths[0])
    return encode_json(paths).decode()


def deadline_from(context: Any, base_s: float | None, per_mib_s: float | None) -> LoadDeadline:
    """A load's deadline: each part the argument, else its flag, else its environment
    variable."""
    env = load_deadline_from_env()
    if base_s is None:
        base_s = flag(context, "kineto_insights_load_timeout_s")
    if per_mib_s is None:
        per_mib_s = flag(context, "kineto_insights_load_timeout_s_per_mib")
    return LoadDeadline(
        env.base_s if base_s is None else float(base_s),
        env.per_mib_s if per_mib_s is None else float(per_mib_s),
    )


def memory_cap_from(context: Any, max_rss_mib: float | None) -> LoadMemoryCap:
    """A load's memory cap: the argument, else the flag, else the environment (or the
    default)."""
    if max_rss_mib is None:
        max_rss_mib = flag(context, "kineto_insights_load_max_rss_mib")
    if max_rss_mib is None:
        return load_memory_cap_from_env()
    return LoadMemoryCap(float(max_rss_mib))


def use_cache_key(key_file: str | None) -> None:
    """Seal the cache's files with the key in ``key_file`` (the flag), else with that of
    ``KINETO_INSIGHTS_CACHE_KEY_FILE``, else with none (``store/seal.py``); the worker
    processes inherit it.

    Raises:
        CacheKeyError: the key file cannot be used (the plugin is then not started, and
            TensorBoard's log names the file and why).
    """
    if key_file is not None and key_file.strip():
        use_key_file(key_file.strip())
    else:
        current_key()  # the environment's key file, checked now rather than at a read


def cache_folder_from(context: Any, cache_dir: Any) -> Path | str | None:
    """The cache folder: the argument, else the flag, else ``KINETO_INSIGHTS_CACHE_DIR``,
    else the default folder (made when missing); ``none`` or a folder that cannot be made:
    None (memory only, with a warning); an fsspec URL as given."""
    raw = cache_dir if cache_dir is not None else flag(context, "kineto_insights_cache_dir")
    if raw is None or not str(raw).strip():
        raw = os.environ.get(CACHE_DIR_ENV)
    if raw is not None and str(raw).strip().lower() == "none":
        return None
    if raw and str(raw).strip().startswith("file://"):
        try:  # file://localhost/x is /x; fsspec read file://HOST/x as ./HOST/x
            raw = without_local_host(str(raw).strip())[len("file://") :]
        except FileHostError as exc:
            logger.warning(
                "Kineto Insights: cache folder %r cannot be used (%s); summaries are kept "
                "in memory only",
                exc.path,
                exc.problem,
            )
            return None
    elif raw and is_url(str(raw).strip()):
        return str(raw).strip()  # object storage (s3://bucket/cache): no folder to make
    folder = Path(str(raw)).expanduser() if raw and str(raw).strip() else cache_dir_from_env()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        logger.warning(
            "Kineto Insights: cache folder %s cannot be used (%s); summaries are kept "
            "in memory only",
            folder,
            exc,
        )
        return None
    return folder


def open_cache(folder: Path | str | None, settings: str) -> DiskCache | None:
    """The :class:`DiskCache` of ``folder``; None without one or when it cannot be used
    (a warning: summaries are then kept in memory only)."""
    if folder is None:
        return None
    try:
        return DiskCache(folder, settings)
    except (ValueError, ImportError) as exc:
        logger.warning(
            "Kineto Insights: cache folder %s cannot be used (%s); summaries are kept "
            "in memory only",
            folder,
            exc,
        )
        return None


@dataclass(frozen=True)
class PluginSettings:
    """Every setting of the plugin (see :class:`~.plugin.KinetoInsightsPlugin` for each
    one's flag, environment variable and default)."""

    sources: list[LogdirSource]
    rescan_s: float
    workers: int
    preload: bool
    cache_folder: Path | str | None
    perfetto_url: str
    deadline: LoadDeadline
    memory_cap: LoadMemoryCap
    retry_backoff_s: float | None
    watch: bool
    follow_symlinks: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        context: Any,
        *,
        rescan_s: float | None = None,
        workers: int | None = None,
        cache_dir: Any = None,
        preload: bool | None = None,
        load_timeout_s: float | None = None,
        load_timeout_s_per_mib: float | None = None,
        retry_backoff_s: float | None = None,
        load_max_rss_mib: float | None = None,
    ) -> PluginSettings:
        """The settings of a plugin made in TensorBoard's ``context``: each argument,
        else its flag, else its environment variable, else its default."""
        use_cache_key(flag(context, "kineto_insights_cache_key_file"))
        if rescan_s is None:
            rescan_s = flag(context, "kineto_insights_rescan_s")
        if workers is None:
            workers = flag(context, "kineto_insights_workers")
        return cls(
            sources=logdir_sources(context),
            rescan_s=rescan_interval_from_env() if rescan_s is None else float(rescan_s),
            workers=workers_from_env() if workers is None else int(workers),
            preload=preload_from_env() if preload is None else bool(preload),
            cache_folder=cache_folder_from(context, cache_dir),
            perfetto_url=perfetto_url_from(flag(context, "kineto_insights_perfetto_url")),
            deadline=deadline_from(context, load_timeout_s, load_timeout_s_per_mib),
            memory_cap=memory_cap_from(context, load_max_rss_mib),
            retry_backoff_s=(
                flag(context, "kineto_insights_retry_backoff_s")
                if retry_backoff_s is None
                else retry_backoff_s
            ),
            watch=watch_from_env(),
            follow_symlinks=follow_roots(flag(context, "kineto_insights_follow_symlinks")),
        )
