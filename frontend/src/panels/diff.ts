// Diff mode: base vs experiment. Headline (step time before → after), metric table with
// verdicts, the largest kernel and op changes as charts, diagnoses gained and lost.

import { chart } from "../charts";
import { badge, el, nameCell, table } from "../dom";
import { fmtBytes, fmtDeltaInUnit, fmtDuration, fmtInUnit, fmtPercent, fmtSignedPercent, fmtSpeedup, isNum, shortenNames } from "../format";
import { DIAGNOSIS_NAMES, VERDICT_DEFINITIONS } from "../labels";
import { changesOption } from "../options";
import { type OneSidedRow, changesNote, headlineParts, largestChanges, oneSidedRows, speedupTone, verdictCounts } from "../shape";
import type { Palette } from "../theme";
import type { DdpBucketStats, DiffDocument, DiffEfficiencyRow, DiffMetric, DiffRow, FoundDiagnosis } from "../types";
import { fmtRate } from "./efficiency";
import { col, row, subhead } from "./shell";

export function verdictBadge(verdict: string | undefined): HTMLElement {
  const v = verdict ?? "within noise";
  return badge(v, `verdict-${v}`, VERDICT_DEFINITIONS[v] ?? v);
}

export function diffHeadline(doc: DiffDocument): Node[] {
  const h = headlineParts(doc);
  if (!h) return [el("div", { className: "state empty" }, "The diff has no headline.")];
  const counts = verdictCounts(doc);
  const headline = el(
    "div",
    { className: `headline verdict-${h.verdict.replace(/\s+/g, "-")}`, dataset: { verdict: h.verdict } },
    el(
      "div",
      { className: "headline-main", title: "Mean step time of the base → mean step time of the experiment (step windows, all profiled steps pooled)." },
      el("span", { className: "headline-label" }, "Step time "),
      el("span", { className: "headline-base" }, h.base),
      el("span", { className: "headline-arrow" }, " → "),
      el("span", { className: "headline-exp" }, h.exp),
    ),
    el(
      "div",
      { className: "headline-sub" },
      el("span", { className: `speedup ${speedupTone(h.verdict, h.speedup)}`, title: "Base step time ÷ experiment step time." }, fmtSpeedup(h.speedup)),
      h.change !== null ? el("span", { className: "change", title: "(experiment − base) ÷ base." }, ` (${fmtSignedPercent(h.change)})`) : null,
      " ",
      verdictBadge(h.verdict),
    ),
    h.text
      ? el(
          "div",
          { className: `headline-text${h.gained.length ? " gained" : ""}`, title: "The step time's change in words, and the high or medium diagnoses the experiment gained." },
          h.text,
        )
      : null,
    ...h.gained.map((g) => el("div", { className: `headline-gained sev-${g.severity}`, title: g.title }, `${g.id} (${g.severity}): ${g.title}`)),
    doc.headline?.straggler_gained
      ? el(
          "div",
          {
            className: "headline-straggler",
            title: "A rank the experiment's view across ranks calls a straggler, and the base's does not: who, what it costs the others, and why it is late.",
          },
          `Gained a straggler: ${doc.headline.straggler_gained.title}`,
        )
      : null,
    el(
      "div",
      { className: "headline-sides" },
      el("span", null, "base: "),
      nameCell(doc.base?.label ?? "base"),
      el("span", null, " · experiment: "),
      nameCell(doc.exp?.label ?? "experiment"),
    ),
    el(
      "div",
      { className: "verdict-counts", title: "Metrics by verdict (see the table below)." },
      ...(["regressed", "improved", "changed", "within noise", "negligible", "unchanged", "not judged"] as const).map((v) =>
        el("span", { className: `vc vc-${v.replace(/\s+/g, "-")}`, title: VERDICT_DEFINITIONS[v] }, `${counts[v]} ${v}`),
      ),
    ),
  );
  const out: Node[] = [];
  const unlike = doc.comparability ?? [];
  if (unlike.length) {
    // first: how the two recordings differ qualifies every number below
    const shown = (v: unknown): string => (v === null || v === undefined ? "unset" : Array.isArray(v) ? v.map(String).join(", ") : String(v));
    out.push(
      el(
        "div",
        { className: "state warning comparability", dataset: { fields: unlike.map((c) => c.field).join(" ") } },
        el("strong", null, "Not like for like: the two sides were recorded differently. "),
        el(
          "ul",
          null,
          ...unlike.map((c) =>
            el("li", { title: `from the ${c.source ?? "trace"}` }, el("code", null, c.field), ` ${shown(c.base)} → ${shown(c.new)}: ${c.why}`),
          ),
        ),
      ),
    );
  }
  out.push(headline);
  if (doc.warnings?.length) {
    out.push(
      el(
        "div",
        { className: "state warning" },
        el("strong", null, "Are these comparable? "),
        el("ul", null, ...doc.warnings.map((w) => el("li", null, w))),
      ),
    );
  }
  return out;
}

export function diffMetrics(doc: DiffDocument): Node[] | string {
  const metrics = doc.metrics ?? [];
  if (!metrics.length) return "No metric is present on both sides.";
  return [
    table<DiffMetric>(
      [
        {
          header: "Metric",
          cell: (m) => m.label,
          cellTitle: (m) =>
            `${m.key} — ${m.better === "higher" ? "higher is better" : m.better === "none" ? "a setting: neither better nor worse" : "lower is better"}` + byRankText(m),
        },
        { header: "Base", numeric: true, cell: (m) => fmtInUnit(m.base, m.unit), cellTitle: (m) => noiseTitle(m, m.base_noise, m.base_n) },
        { header: "Experiment", numeric: true, cell: (m) => fmtInUnit(m.exp, m.unit), cellTitle: (m) => noiseTitle(m, m.exp_noise, m.exp_n) },
        { header: "Change", numeric: true, title: "Experiment − base (fractions in percentage points).", cell: (m) => fmtDeltaInUnit(m.delta, m.unit) },
        { header: "Relative", numeric: true, title: "(experiment − base) ÷ base.", cell: (m) => fmtSignedPercent(m.change_fraction) },
        {
          header: "Noise (2σ)",
          numeric: true,
          title: "Twice the standard error of the difference of the means: a change beyond this is beyond the step-to-step noise.",
          cell: (m) => (isNum(m.stderr) ? `±${fmtInUnit(2 * m.stderr, m.unit)}` : "n/a"),
        },
        { header: "Verdict", cell: (m) => verdictBadge(m.verdict), cellTitle: (m) => m.note ?? "", className: "verdict-col" },
      ],
      metrics,
      { className: "metrics" },
    ),
    ...notJudged(metrics),
    ...bucketsBlock(doc),
    el("p", { className: "note" }, `Noise rule: ${doc.noise_rule ?? "n/a"}.`),
  ];
}

function byRankText(m: DiffMetric): string {
  if (!m.by_rank) return "";
  const one = (values: Record<string, unknown> | undefined) =>
    Object.entries(values ?? {})
      .map(([rank, v]) => `rank ${rank} ${fmtInUnit(v as number, m.unit)}`)
      .join(", ") || "n/a";
  return `\nBy rank — base: ${one(m.by_rank.base)}; experiment: ${one(m.by_rank.exp)}`;
}

function notJudged(metrics: DiffMetric[]): Node[] {
  const rows = metrics.filter((m) => m.note);
  if (!rows.length) return [];
  return [el("ul", { className: "notes" }, ...rows.map((m) => el("li", null, `${m.label}: not judged — ${m.note}`)))];
}

function bucketText(b: DdpBucketStats | null | undefined): string {
  if (!b) return "none";
  const head = isNum(b.count_per_step) ? `${b.count_per_step.toFixed(1)} /step` : `${b.count ?? "?"} total`;
  const sizes = (b.sizes ?? []).map((s) => `${fmtBytes(s.bytes)} ×${s.count}`).join(", ");
  return `${head}, median ${fmtBytes(b.median_bytes)} per collective${sizes ? ` (${sizes})` : ""}`;
}

// DDP gradient buckets (AllReduce sizes) on each side: what bucket_cap_mb changed.
function bucketsBlock(doc: DiffDocument): Node[] {
  const b = doc.communication?.ddp_buckets;
  if (!b || (!b.base && !b.exp)) return [];
  return [
    subhead("DDP buckets", "AllReduce message sizes: under DistributedDataParallel each is one gradient bucket (bucket_cap_mb)."),
    el("ul", { className: "notes" }, el("li", null, `base: ${bucketText(b.base)}`), el("li", null, `experiment: ${bucketText(b.exp)}`)),
  ];
}

function noiseTitle(m: DiffMetric, noise: unknown, n: unknown): string {
  if (!isNum(m.stderr)) return `Mean of ${String(n ?? "?")} value(s), one per span or rank: no step-to-step noise test; a verdict from a 10 % change.`;
  return `Step-to-step standard deviation ${fmtInUnit(noise as number, m.unit)} over ${String(n ?? "?")} steps.`;
}

export function diffChanges(doc: DiffDocument, p: Palette): Node[] | string {
  const kernels = largestChanges(doc.kernels, 12);
  const ops = largestChanges(doc.ops, 12);
  if (!kernels.length && !ops.length && !oneSidedRows(doc.kernels).length && !oneSidedRows(doc.ops).length) return "No kernel or op changed its time per step.";
  const block = (title: string, rows: ReturnType<typeof largestChanges>, noun: string, help: string, unchanged: unknown) =>
    col(
      subhead(title, help),
      rows.length
        ? chart(changesOption(rows, p, noun), `${title}: change in time per step, experiment minus base`, Math.max(140, 40 + rows.length * 24)).node
        : el("p", { className: "muted" }, "No change."),
      el("p", { className: "note changes-note" }, changesNote(rows, isNum(unchanged) ? unchanged : 0)),
    );
  const out: Node[] = [
    row(
      block("Kernels", kernels, "Kernel", "GPU kernels by short name (template arguments folded), time /step. Communication kernels are listed apart.", doc.kernels?.unchanged_count),
      block("CPU ops", ops, "Op", "CPU ops by name, time /step (inclusive).", doc.ops?.unchanged_count),
    ),
  ];
  for (const [title, side, noun] of [
    ["Kernels only on one side", doc.kernels, "Kernel"],
    ["CPU ops only on one side", doc.ops, "Op"],
  ] as const) {
    const rows = oneSidedRows(side, 12);
    if (!rows.length) continue;
    const cut = shortenNames(rows.map((x) => x.name));
    const shortNames = new Map(rows.map((r, i) => [r.name, cut[i]]));
    out.push(
      subhead(title, "Names that only one side runs: added (experiment only), removed (base only), moved out (base only, and the experiment's DataLoader loads in worker processes the profiler does not trace). No verdict: a new or vanished name is not a faster or slower version of anything."),
      table<OneSidedRow>(
        [
          { header: noun, className: "name-col", cell: (r) => nameCell(shortNames.get(r.name) ?? r.name, r.name) },
          { header: "Status", cell: (r) => verdictBadge(r.label), cellTitle: (r) => r.note ?? VERDICT_DEFINITIONS[r.label] ?? "" },
          { header: "Time /step", numeric: true, title: "Time per step on the side that has it.", cell: (r) => fmtDuration(r.perStepUs) },
        ],
        rows,
        { className: "one-sided" },
      ),
    );
  }
  const eff = (doc.efficiency ?? []).filter((r) => isNum(r.base_achieved_flops_per_s) || isNum(r.exp_achieved_flops_per_s));
  if (eff.length) {
    out.push(
      subhead("Kernel efficiency by op group", "Matmul, convolution and attention groups matched by op and input shapes: achieved FLOP/s (FLOPs from the shapes ÷ kernel time) and share of the roof on each side. A summary keeps one value per group, not one per step: the verdict comes from a 10 % change of the achieved FLOP/s (negligible when the group's time moves less than 0.5 % of the base step); the run-wide achieved TFLOP/s and tensor-core share are metric rows, judged against the step-to-step noise."),
      table<DiffEfficiencyRow>(
        [
          { header: "Op group", className: "name-col", cell: (r) => nameCell(`${r.op} ${r.shapes}`) },
          { header: "dtype", cell: (r) => `${r.base_dtype ?? "–"} → ${r.exp_dtype ?? "–"}` },
          { header: "Base", numeric: true, title: "Achieved FLOP/s in the base.", cell: (r) => fmtRate(r.base_achieved_flops_per_s, "FLOP/s") },
          { header: "Experiment", numeric: true, title: "Achieved FLOP/s in the experiment.", cell: (r) => fmtRate(r.exp_achieved_flops_per_s, "FLOP/s") },
          { header: "Of roof", numeric: true, title: "Achieved ÷ attainable under this GPU's roofline, base → experiment.", cell: (r) => `${fmtPercent(r.base_roof_fraction)} → ${fmtPercent(r.exp_roof_fraction)}` },
          { header: "Time /step", numeric: true, cell: (r) => `${fmtDuration(r.base_time_us_per_step)} → ${fmtDuration(r.exp_time_us_per_step)}` },
          { header: "Verdict", cell: (r) => verdictBadge(r.verdict), className: "verdict-col" },
        ],
        eff.slice(0, 12),
        { className: "efficiency-diff" },
      ),
    );
  }
  const comm = doc.kernels?.communication ?? [];
  if (comm.length) {
    out.push(
      subhead("Communication kernels", "NCCL/RCCL kernels run from their rank's arrival until the last rank's: their time /step is mostly waiting when ranks arrive apart, so it gets no verdict. The waited and transfer rows of the metrics say what changed."),
      table<DiffRow>(
        [
          { header: "Kernel", className: "name-col", cell: (r) => nameCell(r.name) },
          { header: "Base /step", numeric: true, cell: (r) => fmtDuration(r.time_us_per_step?.base) },
          { header: "Experiment /step", numeric: true, cell: (r) => fmtDuration(r.time_us_per_step?.exp) },
          { header: "Verdict", cell: (r) => verdictBadge(r.time_us_per_step?.verdict), cellTitle: (r) => r.note ?? "" },
        ],
        comm,
      ),
    );
  }
  return out;
}

export function diffDiagnoses(doc: DiffDocument): Node[] {
  const d = doc.diagnoses ?? {};
  const list = (ids: string[] | undefined, cls: string, empty: string) =>
    ids?.length
      ? el("ul", { className: `diag-ids ${cls}` }, ...ids.map((id) => el("li", { dataset: { diagnosisId: id }, title: id }, DIAGNOSIS_NAMES[id] ?? id)))
      : el("p", { className: "muted" }, empty);
  const found = (items: FoundDiagnosis[] | undefined, side: string) =>
    items?.length
      ? el(
          "ul",
          { className: "notes" },
          ...items.map((f) => el("li", { dataset: { diagnosisId: f.id } }, `${side} [${(f.severity ?? "").toUpperCase()}] ${DIAGNOSIS_NAMES[f.id] ?? f.id} (${f.where ?? "?"}): ${f.title ?? ""}`)),
        )
      : null;
  return [
    row(
      col(subhead("Gained", "Diagnoses of the experiment that the base does not have (span- and run-level)."), list(d.appeared, "gained", "None.")),
      col(subhead("Lost", "Diagnoses of the base that are gone in the experiment."), list(d.disappeared, "lost", "None.")),
      col(subhead("Kept", "Diagnoses on both sides."), list(d.kept, "kept", "None.")),
    ),
    ...[found(d.found?.base, "base"), found(d.found?.exp, "experiment")].filter((x): x is HTMLUListElement => x !== null),
    ...(d.predictions?.length
      ? [
          subhead("Predictions checked", "For each diagnosis the experiment lost: the step the base predicted for its fix (replayed on the base's step graph) beside the experiment's measured step."),
          el("ul", { className: "notes predictions" }, ...d.predictions.map((c) => el("li", { dataset: { diagnosisId: c.id } }, c.text))),
        ]
      : []),
  ];
}

export function diffPerRank(doc: DiffDocument): Node[] | null {
  const rows = (doc.per_rank ?? []) as { rank?: number; step_time_us?: DiffMetric }[];
  if (!rows.length) return null;
  return [
    subhead("Step time per rank"),
    table(
      [
        { header: "Rank", cell: (r) => String(r.rank ?? "?") },
        { header: "Base", numeric: true, cell: (r) => fmtInUnit(r.step_time_us?.base, "µs") },
        { header: "Experiment", numeric: true, cell: (r) => fmtInUnit(r.step_time_us?.exp, "µs") },
        { header: "Relative", numeric: true, cell: (r) => fmtSignedPercent(r.step_time_us?.change_fraction) },
        { header: "Verdict", cell: (r) => verdictBadge(r.step_time_us?.verdict) },
      ],
      rows,
    ),
  ];
}
