"""The diff of two sides (a run, a worker or a span each), as the plugin and the command
line make it: each side's spans summarised, the unreadable ones named in ``warnings``
and left out, the ``tb_kineto_insights.diff/1`` document of the rest
(:func:`~tb_kineto_insights.compare.diff.diff`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from tb_kineto_insights.compare.diff import diff
from tb_kineto_insights.logdir.discovery import Span
from tb_kineto_insights.schema import DiffDocument
from tb_kineto_insights.service.errors import Unreadable
from tb_kineto_insights.service.workspace import Workspace
from tb_kineto_insights.store.cache import LoadResult, encode_json

#: The diff of ``(base_side, exp_side, *, base_label, exp_label)``; sides are
#: ``[("worker/span", Summary), ...]``; a :class:`DiffDocument` or built-ins.
DiffHook = Callable[..., Any]
#: The default diff: :func:`~tb_kineto_insights.compare.diff.diff`.
DEFAULT_DIFF: DiffHook = diff


@dataclass(frozen=True)
class DiffAnswer:
    """A diff, or what it waits for: ``body`` (its JSON) when every span of both sides
    is read (or failed), else ``pending`` (the 202 document)."""

    body: bytes | None = None
    pending: dict[str, Any] | None = None


def with_warnings(diffed: Any, warnings: Sequence[str]) -> Any:
    """A diff (Struct or built-ins) with ``warnings`` added to its own."""
    if isinstance(diffed, DiffDocument) and warnings:
        return msgspec.structs.replace(diffed, warnings=[*diffed.warnings, *warnings])
    if isinstance(diffed, dict) and warnings:
        return {**diffed, "warnings": [*diffed.get("warnings", []), *warnings]}
    return diffed


def diff_answer(
    workspace: Workspace,
    base: list[Span],
    exp: list[Span],
    labels: tuple[str, str],
    wait_s: float,
    hook: DiffHook,
) -> DiffAnswer:
    """The diff of spans ``base`` against ``exp`` (``labels``: how each side is named),
    made once for every request asking for the same spans.

    Raises:
        Unreadable: no span of a side could be read, or the diff cannot be made (e.g.
            no steps on one side).
    """
    gathered = workspace.gather(base + exp, wait_s)
    pending = gathered.pending(base + exp, with_run=True)
    if pending:
        total = len(base) + len(exp)
        return DiffAnswer(pending={"state": "loading", "pending": pending, "total": total})
    sides: list[list[tuple[Span, LoadResult]]] = [[], []]
    warnings: list[str] = []
    for i, (span, status, result) in enumerate(
        zip(base + exp, gathered.statuses, gathered.results, strict=True)
    ):
        which = 0 if i < len(base) else 1
        if result is None or result.summary is None:
            warnings.append(f"{('base', 'exp')[which]}: {status.error or 'not readable'}")
        else:
            sides[which].append((span, result))
    for which, name in ((0, "base"), (1, "exp")):
        if not sides[which]:
            raise Unreadable(f"{name}: no trace could be read ({'; '.join(warnings)})")
    key = (
        "diff",
        id(hook),
        labels,
        len(base),
        tuple((i, r is not None) for i, r in zip(gathered.idents, gathered.results, strict=True)),
        tuple(warnings),
    )

    def compute() -> bytes:
        b, e = ([(f"{s.worker}/{s.span}", r.decoded()) for s, r in side] for side in sides)
        try:
            diffed = hook(b, e, base_label=labels[0], exp_label=labels[1])
        except ValueError as exc:  # e.g. no steps on one side: the input's problem
            raise Unreadable(str(exc)) from None
        return encode_json(with_warnings(diffed, warnings))

    return DiffAnswer(body=workspace.derived_once(key, compute))
