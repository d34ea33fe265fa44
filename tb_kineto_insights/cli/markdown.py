"""``--format markdown`` of ``report``, ``diff`` and ``check``: GitHub-flavoured Markdown
for a PR comment or a CI step summary (``>> $GITHUB_STEP_SUMMARY``).

What each holds: the headline first (``report``: runs, spans, errors; ``diff``/``check``:
step time before → after with its verdict, and ``check``'s pass/fail with the reasons),
then the diagnoses, each with its evidence in a collapsed ``<details>`` table (values in
the unit their key names, written by ``analysis/evidence_units.py`` as the tab and the
text report write them), then for a diff the
largest changes per step and the metrics judged beyond noise.

Names and text from the traces and the file system (run, worker and file names, kernel
and op names, titles and evidence that quote them, reader errors) are untrusted: a
folder named ``<img src=x onerror=…>``, ``@team``, or with a newline and ``# heading``
in it must not become HTML, ping anyone, or forge lines in a PR comment. Names go into
code spans (:func:`code`: a fence longer than any backtick run inside, so nothing closes
it early; HTML and mentions are inert there); other text through :func:`md_text`
(Markdown and HTML punctuation backslash-escaped, ``@`` followed by a zero-width space so
that GitHub links no mention). In both, control characters (newline, ESC, RLO) are
written as visible escapes (``\x0a``, ``\x1b``: ``analysis.units.terminal_safe``).
Table cells also escape ``|`` (:func:`cell`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from tb_kineto_insights.analysis.evidence_units import (
    evidence_texts,
    format_evidence,
    format_scalar,
)
from tb_kineto_insights.analysis.units import fmt_duration_us, terminal_safe
from tb_kineto_insights.analysis.what_if import what_if_lines
from tb_kineto_insights.compare.before_after import change_text, fmt_row_value
from tb_kineto_insights.schema import DiffDocument, Summary
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.report import Report

#: Largest changes listed by ``diff``/``check`` (the document holds ten).
LARGEST_CHANGES = 10


#: Characters that start Markdown or HTML markup inline (CommonMark lets any ASCII
#: punctuation be backslash-escaped; these are the ones that can change what renders).
_MARKUP = re.compile(r"([\\`*_\[\]<>&~|!#])")
_PIPE = re.compile(r"(?<!\\)\|")
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*")


def md_text(value: Any) -> str:
    """Untrusted text as inline Markdown that renders as exactly that text: control
    characters as visible escapes, markup punctuation backslash-escaped, ``@`` followed
    by a zero-width space (no mention)."""
    text = _MARKUP.sub(r"\\\1", terminal_safe(str(value)))
    return text.replace("@", "@\u200b")


def code(value: Any) -> str:
    """An untrusted name as a code span: control characters as visible escapes, fenced
    with one backtick more than its longest run of backticks (padded with a space when
    it starts or ends with one), so nothing in it ends the span."""
    text = terminal_safe(str(value))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(text: Any) -> str:
    """Markdown (already escaped: :func:`md_text`, :func:`code`, or this module's own)
    safe inside a table cell: each ``|`` not already escaped written ``\\|`` (GFM
    tables honour that inside code spans too), line breaks as spaces."""
    return _PIPE.sub(r"\\|", str(text).replace("\n", " ")).strip()


def _key(key: Any, escape: Callable[[Any], str] = md_text) -> str:
    """An evidence key (or a record's field): this package's identifiers as they are,
    anything else (a name from the data) through ``escape``."""
    text = str(key)
    return text if _IDENTIFIER.fullmatch(text) else escape(text)


def fmt_value(key: str, value: Any, escape: Callable[[Any], str] = str) -> str:
    """One evidence value in its key's unit (``analysis.evidence_units``, the tab's and
    the text report's formatter too); a list of records one record a line (``<br>``).
    ``escape``: applied to every text from the data (strings, keys of a mapping or a
    record that are not this package's identifiers), e.g. :func:`md_text`; numbers and
    units are ours."""
    return format_evidence(
        key, value, escape, escape_key=lambda k: _key(k, escape), records_sep="<br>"
    )


def _evidence_rows(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key, value)`` per evidence key (``analysis.evidence_units.evidence_texts``); a
    straggler's ``cause`` one row per field (``cause.us_per_step``, …), each in its own
    unit, so the numbers read as the title's."""
    return evidence_texts(
        evidence, md_text, escape_key=lambda k: _key(k, md_text), records_sep="<br>"
    )


def _evidence(evidence: dict[str, Any]) -> list[str]:
    rows = _evidence_rows(evidence)
    if not rows:
        return []
    lines = ["<details><summary>Evidence</summary>", "", "| | |", "| --- | --- |"]
    lines += [f"| {cell(_key(k))} | {cell(v)} |" for k, v in rows]
    return [*lines, "", "</details>", ""]


def _diagnoses(found: Iterable[tuple[str, Diagnosis]]) -> list[str]:
    lines: list[str] = []
    for where, d in found:
        impact = (
            f" ({format_scalar('fraction', d.impact_fraction)} of step time)"
            if d.impact_fraction
            else ""
        )
        lines.append(
            f"- **{md_text(d.severity.upper())}** {code(d.id)} in {code(where)}: "
            f"{md_text(d.title)}{impact}"
        )
        lines += ["", *[f"  {x}" if x else "" for x in _evidence(d.evidence)]]
        if d.recommendation:
            lines += [f"  *What to do:* {md_text(d.recommendation)}", ""]
    return lines


def _what_if(report: Report) -> list[str]:
    """``### What if``: per span with a recommended fix, each fix's predicted step."""
    rows = []
    for run in report.runs:
        for w in run.workers:
            for span in w.spans:
                if not isinstance(span.summary, Summary):
                    continue
                where = f"{run.run}/{w.worker}/{span.span}"
                for line in what_if_lines(span.summary.what_if):
                    rows.append(f"| {cell(code(where))} | {cell(md_text(line))} |")
    if not rows:
        return []
    return [
        "### What if",
        "",
        "Each recommended fix with the step it would give, replayed on the step's "
        "dependency graph; the top fixes together last.",
        "",
        "| span | fix: step now → predicted (speed-up) |",
        "| --- | --- |",
        *rows,
        "",
    ]


def report_markdown(
    report: Report, found: list[tuple[str, Diagnosis]], errors: list[tuple[str, str]]
) -> str:
    """The ``report`` document as Markdown (see module docstring): ``found`` its
    diagnoses as ``(where, diagnosis)``, most severe first; ``errors`` the unreadable
    spans as ``(where, "Type: message")``."""
    spans = [s for run in report.runs for w in run.workers for s in w.spans]
    ok = len(spans) - len(errors)
    lines = [
        f"## tb-kineto-insights report: {code(report.path)}",
        "",
        f"{len(report.runs)} run(s), {len(spans)} span(s), {len(spans) - ok} error(s); "
        f"{len(found)} diagnosis(es), most severe first.",
        "",
    ]
    lines += _what_if(report)
    if found:
        lines += ["### Diagnoses", "", *_diagnoses(found)]
    else:
        lines += ["No diagnosis crossed its threshold." if ok else "No trace could be read.", ""]
    if errors:
        lines += ["### Errors", "", "| span | error |", "| --- | --- |"]
        for where, text in errors:
            lines.append(f"| {cell(code(where))} | {cell(md_text(text))} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _headline(doc: DiffDocument) -> list[str]:
    h = doc.headline
    speed = ""
    if h.speedup and abs(h.speedup - 1) < 0.005:
        speed = " (same speed)"
    elif h.speedup:
        speed = (
            f" ({h.speedup:.2f}× faster)" if h.speedup >= 1 else f" ({1 / h.speedup:.2f}× slower)"
        )
    return [
        f"**Step time {fmt_row_value(h.base_step_us, 'µs')} → "
        f"{fmt_row_value(h.exp_step_us, 'µs')}{speed}: "
        f"{md_text(h.verdict)}**",
        "",
        f"base: {code(doc.base.label)} · exp: {code(doc.exp.label)}",
        "",
    ]


def _diff_body(doc: DiffDocument) -> list[str]:
    lines: list[str] = []
    for warning in doc.warnings:
        lines.append(f"> ⚠️ {md_text(warning)}")
    if doc.warnings:
        lines.append("")
    d = doc.diagnoses
    if d.appeared or d.disappeared:
        lines += ["### Diagnoses", ""]
        exp_titles = {f.id: f.title for f in d.found.exp}
        base_titles = {f.id: f.title for f in d.found.base}
        lines += [f"- appeared {code(i)}: {md_text(exp_titles.get(i, ''))}" for i in d.appeared]
        lines += [
            f"- disappeared {code(i)}: {md_text(base_titles.get(i, ''))}" for i in d.disappeared
        ]
        lines.append("")
    if d.predictions:
        lines += ["### Predictions checked", ""]
        lines += [f"- {md_text(c.text)}" for c in d.predictions]
        lines.append("")
    largest = [c for c in doc.largest_changes if c.delta_us_per_step][:LARGEST_CHANGES]
    if largest:
        lines += ["### Largest changes (time per step)", "", "| Δ /step | what | verdict |"]
        lines.append("| ---: | --- | --- |")
        for c in largest:
            delta = ("+" if c.delta_us_per_step > 0 else "") + fmt_duration_us(c.delta_us_per_step)
            lines.append(
                f"| {cell(delta)} | {cell(md_text(c.what))} {cell(code(c.name))} "
                f"| {cell(md_text(c.verdict))} |"
            )
        lines.append("")
    judged = [m for m in doc.metrics if m.verdict in ("improved", "regressed", "changed")]
    if judged:
        lines += ["### Metrics beyond noise", "", "| metric | base | exp | change | verdict |"]
        lines.append("| --- | ---: | ---: | ---: | --- |")
        for m in judged:
            lines.append(
                f"| {cell(md_text(m.label))} | {cell(md_text(fmt_row_value(m.base, m.unit)))} "
                f"| {cell(md_text(fmt_row_value(m.exp, m.unit)))} "
                f"| {cell(md_text(change_text(m)))} "
                f"| {cell(md_text(m.verdict))} |"
            )
        lines.append("")
    return lines


def diff_markdown(doc: DiffDocument) -> str:
    """The ``diff`` document as Markdown (see module docstring)."""
    lines = ["## tb-kineto-insights diff", "", *_headline(doc), *_diff_body(doc)]
    return "\n".join(lines) + "\n"


def check_markdown(doc: DiffDocument, reasons: list[str]) -> str:
    """``check``'s verdict (``reasons``: why it fails; empty: it passes) and the diff, as
    Markdown."""
    verdict = (
        ["### ❌ FAIL", "", *[f"- {md_text(r)}" for r in reasons]] if reasons else ["### ✅ OK"]
    )
    lines = ["## tb-kineto-insights check", "", *_headline(doc), *verdict, ""]
    if not reasons:
        lines += ["No limit crossed.", ""]
    return "\n".join([*lines, *_diff_body(doc)]) + "\n"
