"""One typed description of everything the tool says: a ``msgspec.Struct`` per panel
(one module per panel: ``steps``, ``kernels``, ``idle``, ``communication``, ``memory``,
``health``, ``tables``, ``diagnoses``), the span :class:`Summary`, the run view across
ranks :class:`RunView`, the :class:`DiffDocument` (``tb_kineto_insights.diff/1``) and
the :class:`Report` envelope (``tb_kineto_insights.report/1``).

These Structs are the values the code passes around. The analysis builds them: each
panel builder returns its Struct, ``make_diagnosis`` a
:class:`~tb_kineto_insights.schema.diagnoses.Diagnosis`, ``summary.summarize_trace`` the
:class:`Summary` from them; ``summary.summarize_run`` returns a :class:`RunView`,
``compare.diff.diff`` a :class:`DiffDocument`, ``cli.main.build_report`` a :class:`Report`
(these three are made with ``msgspec.convert``, which checks every field's type), and
consumers read them by attribute. Every summary the cache reads back is decoded with
:func:`summary_decoder` (an entry that does not validate is dropped and computed again);
built-ins are made only where JSON goes out. ``docs/schema/*.json`` is generated from
them (``make schema``,
``scripts/gen_schema.py``), and ``frontend/src/types.ts`` is generated from that JSON
Schema. Conventions: units are in field names (``_us`` microseconds, ``_ns``
nanoseconds, ``_bytes``, ``_fraction`` a share in [0, 1], ``_gbps`` 10^9 bytes/s,
``_per_step`` a mean over the steps analysed); a key that some documents lack is a field
defaulting to ``msgspec.UNSET`` (optional in the schema), a key that can be ``null`` is
``T | None``; maps keyed by data (kernel names, causes, devices, ids) are
``dict[str, T]``. ``Diagnosis.evidence`` is a map whose keys depend on the diagnosis id
(see ``DESIGN.md``).

:data:`SCHEMA_FINGERPRINT` (SHA-256 of the Summary's and RunView's JSON Schema) is the one
version of their shape: it is part of every cache key (``cache.entry_key``), so changing a
Struct invalidates cached summaries by itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tb_kineto_insights.schema.report import Report
from tb_kineto_insights.schema.run_view import RunView
from tb_kineto_insights.schema.summary import Summary

if TYPE_CHECKING:
    from tb_kineto_insights.schema.diff import DiffDocument
    from tb_kineto_insights.schema.timeline import TimelineStep

__all__ = [
    "DIFF_SCHEMA",
    "REPORT_SCHEMA",
    "SCHEMA_FINGERPRINT",
    "SUMMARY_DECODER",
    "DiffDocument",
    "Report",
    "RunView",
    "Summary",
    "json_schemas",
    "schema_fingerprint",
    "check_summary",
    "summary_decoder",
    "validate_summary",
]

#: Schema id of ``report --format json`` (the :class:`Report` document).
REPORT_SCHEMA = "tb_kineto_insights.report/1"
#: Schema id of the diff document (:class:`DiffDocument`).
DIFF_SCHEMA = "tb_kineto_insights.diff/1"


@functools.cache
def summary_decoder() -> msgspec.json.Decoder[Summary]:
    """Decodes one summary's JSON bytes into a :class:`Summary`; its ``decode`` raises
    ``msgspec.ValidationError`` (a ``ValueError``) when a key is missing or of the wrong
    type, ``msgspec.DecodeError`` on malformed JSON. Built on first use (also as
    :data:`SUMMARY_DECODER`): a ``report --cache none`` never needs it."""
    return msgspec.json.Decoder(Summary)


def json_schemas() -> dict[str, dict[str, Any]]:
    """``{file name: JSON Schema}`` for ``docs/schema/``: ``summary.schema.json``,
    ``run_view.schema.json``, ``diff.schema.json``, ``report.schema.json``,
    ``timeline.schema.json`` (one step's timeline, ``/timeline``),
    ``history.schema.json``, ``across_runs.schema.json`` (``/across_runs``)
    (JSON Schema 2020-12, as written by ``msgspec.json.schema``;
    Struct docstrings become ``description``)."""
    out: dict[str, dict[str, Any]] = {}
    for name, typ in (
        ("summary", Summary),
        ("run_view", RunView),
        ("diff", _diff_document()),
        ("report", Report),
        ("timeline", _timeline_step()),
        ("history", _history_document()),
        ("across_runs", _across_runs_page()),
    ):
        schema = msgspec.json.schema(typ)
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
        out[f"{name}.schema.json"] = schema
    return out


@functools.cache
def schema_fingerprint() -> str:
    """SHA-256 (hex) of the JSON Schema of the Summary, the RunView and the TimelineStep
    (stored beside the summary in a cache entry): changes whenever a Struct of these
    changes (a field added, removed, renamed, retyped, made optional).
    Part of every summary's cache key, hence of every stored run view's key too (made
    from its spans' entry keys, ``index.run_view_key``). Computed on first use (also as
    :data:`SCHEMA_FINGERPRINT`): as a module constant, generating the JSON Schema would
    add to every start-up (``benchmarks/RESULTS.md``), and ``report --cache none`` never
    needs it."""
    import hashlib  # here: every start-up would pay it otherwise

    return hashlib.sha256(
        msgspec.json.encode(
            msgspec.json.schema_components([Summary, RunView, _timeline_step()]), order="sorted"
        )
    ).hexdigest()


def _timeline_step() -> type[TimelineStep]:
    """:class:`~tb_kineto_insights.schema.timeline.TimelineStep`, imported on first use."""
    from tb_kineto_insights.schema.timeline import TimelineStep

    return TimelineStep


def _diff_document() -> type[DiffDocument]:
    """:class:`~tb_kineto_insights.schema.diff.DiffDocument`, imported on first use: a
    ``report`` never needs the diff's Structs (their import would add to its start-up)."""
    from tb_kineto_insights.schema.diff import DiffDocument

    return DiffDocument


def _history_document() -> type[Any]:
    """:class:`~tb_kineto_insights.schema.history.HistoryDocument`, imported on first use."""
    from tb_kineto_insights.schema.history import HistoryDocument

    return HistoryDocument


def _across_runs_page() -> type[Any]:
    """:class:`~tb_kineto_insights.schema.history.AcrossRunsPage`, imported on first use."""
    from tb_kineto_insights.schema.history import AcrossRunsPage

    return AcrossRunsPage


_LAZY: dict[str, Callable[[], Any]] = {
    "SCHEMA_FINGERPRINT": schema_fingerprint,
    "SUMMARY_DECODER": summary_decoder,
    "DiffDocument": _diff_document,
}


def __getattr__(name: str) -> Any:
    """``SCHEMA_FINGERPRINT`` (:func:`schema_fingerprint`), ``SUMMARY_DECODER``
    (:func:`summary_decoder`) and ``DiffDocument``, made on first access (PEP 562)."""
    make = _LAZY.get(name)
    if make is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return make()


def _to_json_hook(obj: Any) -> Any:
    """numpy scalars and arrays (their ``tolist``), as the cache writes them."""
    tolist = getattr(obj, "tolist", None)
    if tolist is None:
        raise NotImplementedError(f"cannot write {type(obj).__name__} as JSON")
    return tolist()


@functools.lru_cache(maxsize=1)
def _checking_encoder() -> msgspec.json.Encoder:
    return msgspec.json.Encoder(enc_hook=_to_json_hook)


def check_summary(summary: Summary) -> None:
    """Check that a built :class:`Summary` (constructed, so not type-checked) fits its
    schema as JSON: encoded as the cache and the server write it (NaN as ``null``,
    numpy values as numbers) and decoded with :func:`summary_decoder`. Raises
    ``msgspec.ValidationError`` naming the first key that does not fit (e.g. a boolean
    from the trace in ``communication.world_size``),
    ``msgspec.EncodeError``/``TypeError``/``NotImplementedError`` for a value JSON
    cannot hold."""
    try:
        data = _checking_encoder().encode(summary)
    except UnicodeEncodeError:  # a lone surrogate: a file name that is not UTF-8
        builtins = msgspec.to_builtins(summary, enc_hook=_to_json_hook)
        data = _checking_encoder().encode(_without_surrogates(builtins))
    summary_decoder().decode(data)


def _without_surrogates(obj: Any) -> Any:
    """Built-ins with every string made encodable (lone surrogates backslash-escaped), as
    the cache writes such names (only their text differs, not the shape checked)."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(obj, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_without_surrogates(v) for v in obj]
    return obj


def validate_summary(summary: Any) -> Summary:
    """``summary`` (a summary as built-ins: ``{panel: ...}``) checked against
    :class:`Summary`; returns the Struct. Raises ``msgspec.ValidationError`` naming the
    first key that does not fit (e.g. ``Expected `float`, got `str` - at
    `$.steps.mean_step_us```)."""
    return msgspec.convert(summary, Summary, strict=True)
