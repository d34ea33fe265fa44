// The Efficiency panel: kernel efficiency per op group against the roofline of the
// device's datasheet peaks (summary.efficiency, analysis/efficiency.py). A log-log chart
// (arithmetic intensity → achieved FLOP/s, the roof lines of this GPU, one point per op
// group sized by its time) and a sortable table of the groups.

import type { LineSeriesOption } from "echarts/charts";

import { chart } from "../charts";
import { el, kpis, notes } from "../dom";
import { fmtCount, fmtDuration, fmtPercent, isNum } from "../format";
import type { ChartOption } from "../options";
import type { Palette } from "../theme";
import { tipNode } from "../tooltip";
import type { EfficiencyPanel, EfficiencyPeak, EfficiencyRow, Summary } from "../types";
import { col, row, subhead } from "./shell";

const CEILING_NOTE =
  "Datasheet peaks are ceilings (boost clocks, ideal kernels): well-shaped large GEMMs reach about 70–85 % of them; a fraction is against that ceiling, not against what this kernel could do.";

const UNIT_LABEL: Record<string, string> = {
  fp64: "FP64",
  fp64_tensor: "FP64 tensor",
  fp32: "FP32 (CUDA cores)",
  tf32_tensor: "TF32 tensor",
  bf16_tensor: "BF16 tensor",
  fp16_tensor: "FP16 tensor",
  fp8_tensor: "FP8 tensor",
  memory: "memory",
};

export function fmtRate(perS: number | null | undefined, unit: "FLOP/s" | "B/s"): string {
  if (!isNum(perS)) return "–";
  const scales: [number, string][] = [
    [1e15, "P"],
    [1e12, "T"],
    [1e9, "G"],
    [1e6, "M"],
  ];
  for (const [div, prefix] of scales) if (Math.abs(perS) >= div) return `${(perS / div).toFixed(perS / div >= 100 ? 0 : 1)} ${prefix}${unit}`;
  return `${perS.toFixed(0)} ${unit}`;
}

function peakOf(peak: EfficiencyPeak, unit: string): number | null {
  const key = `${unit}_flops_per_s` as keyof EfficiencyPeak;
  const v = peak[key];
  return typeof v === "number" ? v : null;
}

// Roofline chart option: x = FLOP/byte, y = TFLOP/s (both log); a roof per unit used by a
// row (plus bf16 and fp32 for reference), min(peak, x × bandwidth); points sized by time.
export function rooflineOption(e: EfficiencyPanel, p: Palette): ChartOption | null {
  const peak = e.peak;
  const pts = e.rows.filter((r) => isNum(r.arithmetic_intensity) && isNum(r.achieved_flops_per_s) && r.arithmetic_intensity > 0);
  if (!peak || !pts.length) return null;
  const bw = peak.memory_bytes_per_s;
  const xs = pts.map((r) => r.arithmetic_intensity as number);
  const xMin = Math.min(0.1, ...xs) / 2;
  const xMax = Math.max(2000, ...xs) * 2;
  const units = Array.from(new Set([...pts.map((r) => r.unit ?? ""), "bf16_tensor", "fp32"])).filter((u) => u && peakOf(peak, u) !== null);
  const colors = [p.accent, p.accent2, p.warn, p.good, p.bad, p.neutral];
  const series: LineSeriesOption[] = units.map((u, i) => {
    const top = peakOf(peak, u) as number;
    const ridge = top / bw;
    const line: [number, number][] = [
      [xMin, (xMin * bw) / 1e12],
      [Math.max(xMin, Math.min(ridge, xMax)), (Math.min(top, Math.min(ridge, xMax) * bw)) / 1e12],
      [xMax, top / 1e12],
    ];
    return {
      type: "line",
      name: `${UNIT_LABEL[u] ?? u} roof`,
      data: line,
      showSymbol: false,
      silent: true,
      lineStyle: { color: colors[i % colors.length], width: 1.5, type: u === "fp32" ? "dashed" : "solid" },
      itemStyle: { color: colors[i % colors.length] },
    };
  });
  const total = pts.reduce((a, r) => a + r.time_us_per_step, 0) || 1;
  const unitIndex = (u: string | null | undefined) => Math.max(0, units.indexOf(u ?? ""));
  series.push({
    type: "line",
    name: "op groups",
    data: pts.map((r) => ({
      value: [r.arithmetic_intensity as number, (r.achieved_flops_per_s as number) / 1e12],
      symbolSize: 6 + 30 * Math.sqrt(r.time_us_per_step / total),
      itemStyle: { color: colors[unitIndex(r.unit) % colors.length], opacity: 0.8 },
    })),
    showSymbol: true,
    symbol: "circle",
    lineStyle: { opacity: 0, width: 0 },
    emphasis: { scale: 1.2 },
  });
  return {
    animation: false,
    grid: { left: 70, right: 20, top: 36, bottom: 50 },
    legend: { top: 0, textStyle: { color: p.text }, data: series.map((s) => String(s.name)) },
    tooltip: {
      trigger: "item",
      confine: true,
      backgroundColor: p.tooltipBackground,
      borderColor: p.tooltipBorder,
      textStyle: { color: p.text, fontSize: 12 },
      formatter: ((params: { seriesName?: string; dataIndex?: number }) => {
        if (params.seriesName !== "op groups" || !isNum(params.dataIndex)) return "";
        const r = pts[params.dataIndex];
        return tipNode(`${r.op} ${r.shapes} (${r.dtype})`, [
          { label: "time per step", value: fmtDuration(r.time_us_per_step), strong: true },
          { label: "calls per step", value: fmtCount(r.calls_per_step) },
          { label: "achieved", value: fmtRate(r.achieved_flops_per_s, "FLOP/s") },
          { label: "bytes moved", value: fmtRate(r.achieved_bytes_per_s, "B/s") },
          { label: "intensity", value: `${fmtCount(r.arithmetic_intensity)} FLOP/B` },
          { label: "attainable", value: fmtRate(r.attainable_flops_per_s, "FLOP/s") },
          { label: "of roof", value: fmtPercent(r.roof_fraction) },
          { label: "roof", value: `${UNIT_LABEL[r.unit ?? ""] ?? r.unit ?? "–"}, ${r.bound ?? "–"}-bound` },
        ], r.reason ?? undefined);
      }) as unknown as undefined,
    },
    xAxis: {
      type: "log",
      name: "arithmetic intensity (FLOP/byte)",
      nameLocation: "middle",
      nameGap: 28,
      min: xMin,
      max: xMax,
      axisLabel: { color: p.muted },
      splitLine: { lineStyle: { color: p.split } },
    },
    yAxis: {
      type: "log",
      name: "achieved TFLOP/s",
      nameLocation: "middle",
      nameGap: 50,
      axisLabel: { color: p.muted },
      splitLine: { lineStyle: { color: p.split } },
    },
    series,
  } as ChartOption;
}

type SortKey = "time_us_per_step" | "calls_per_step" | "achieved_flops_per_s" | "achieved_bytes_per_s" | "arithmetic_intensity" | "roof_fraction" | "op";

interface SortCol {
  header: string;
  key: SortKey;
  title: string;
  numeric: boolean;
  cell: (r: EfficiencyRow) => Node | string;
}

const COLUMNS: SortCol[] = [
  {
    header: "op",
    key: "op",
    title: "The CPU op that launched the kernels, its input shapes and dtype (hover: in full, with its kernels).",
    numeric: false,
    cell: (r) =>
      el(
        "span",
        { className: "op-group", title: `${r.op} ${r.shapes} ${r.dtype}\nkernels: ${r.kernels.join(", ")}` },
        el("strong", null, r.op),
        " ",
        el("span", { className: "muted" }, r.shapes.length > 48 ? `${r.shapes.slice(0, 47)}…` : r.shapes),
        ` ${r.dtype}`,
      ),
  },
  { header: "time / step", key: "time_us_per_step", title: "Summed duration of the group's kernels per step.", numeric: true, cell: (r) => fmtDuration(r.time_us_per_step) },
  { header: "calls / step", key: "calls_per_step", title: "Ops of the group that launched a kernel, per step.", numeric: true, cell: (r) => fmtCount(r.calls_per_step) },
  { header: "achieved", key: "achieved_flops_per_s", title: "FLOPs (from the shapes) ÷ kernel time.", numeric: true, cell: (r) => fmtRate(r.achieved_flops_per_s, "FLOP/s") },
  { header: "bytes", key: "achieved_bytes_per_s", title: "Bytes read and written (from the shapes) ÷ kernel time.", numeric: true, cell: (r) => fmtRate(r.achieved_bytes_per_s, "B/s") },
  { header: "FLOP/B", key: "arithmetic_intensity", title: "Arithmetic intensity: FLOPs ÷ bytes.", numeric: true, cell: (r) => (isNum(r.arithmetic_intensity) ? fmtCount(r.arithmetic_intensity) : "–") },
  {
    header: "of roof",
    key: "roof_fraction",
    title: "Achieved ÷ attainable, attainable = min(peak of its unit, intensity × bandwidth); memory ops: bytes/s ÷ bandwidth.",
    numeric: true,
    cell: (r) => {
      const text =
        r.category === "memory"
          ? `${fmtPercent(r.roof_fraction)} of bandwidth`
          : `${fmtPercent(r.roof_fraction)} ${UNIT_LABEL[r.unit ?? ""] ?? ""}${r.bound ? `, ${r.bound}-bound` : ""}`;
      const low = isNum(r.roof_fraction) && r.roof_fraction < 0.3 && r.category !== "memory";
      return el("span", { className: low || r.cuda_cores ? "bad" : "", title: r.reason ?? (r.cuda_cores ? "fp32 on CUDA cores" : "") }, text);
    },
  },
];

function sortValue(r: EfficiencyRow, key: SortKey): number | string {
  if (key === "op") return r.op;
  const v = r[key];
  return isNum(v) ? v : -Infinity;
}

// A table whose header cells sort the rows (click again: reverse).
export function sortableTable(rows: EfficiencyRow[]): HTMLElement {
  const wrap = el("div", { className: "table-wrap" });
  let key: SortKey = "time_us_per_step";
  let desc = true;
  const draw = () => {
    const sorted = [...rows].sort((a, b) => {
      const x = sortValue(a, key);
      const y = sortValue(b, key);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return desc ? -c : c;
    });
    const head = el(
      "tr",
      null,
      ...COLUMNS.map((c) => {
        const mark = c.key === key ? (desc ? " ▼" : " ▲") : "";
        const th = el("th", { className: c.numeric ? "n sortable" : "sortable", title: c.title, scope: "col", attrs: { "aria-sort": c.key === key ? (desc ? "descending" : "ascending") : "none" } }, `${c.header}${mark}`);
        th.addEventListener("click", () => {
          desc = c.key === key ? !desc : c.numeric;
          key = c.key;
          draw();
        });
        return th;
      }),
    );
    const body = el("tbody", null, ...sorted.map((r) => el("tr", null, ...COLUMNS.map((c) => el("td", { className: c.numeric ? "n" : "" }, c.cell(r))))));
    wrap.replaceChildren(el("table", { className: "grid efficiency-table" }, el("thead", null, head), body));
  };
  draw();
  return wrap;
}

export function efficiencyPanel(s: Summary, p: Palette): Node[] | string {
  const e = s.efficiency;
  if (!e) return "This summary has no efficiency data (made by an older version: reload to re-analyse).";
  if (e.device === null || e.device === undefined) return e.notes.join(" ") || "No GPU kernels in this trace.";
  const peak = e.peak;
  const out: Node[] = [
    kpis([
      { label: "GPU", value: peak ? peak.model : e.device_name ?? "unknown", sub: peak ? "peaks from its datasheet" : "no peak table entry", definition: peak ? `Peaks: ${peak.source}` : "Unknown GPU: give its peaks with --threshold peak_tensor_flops_per_s / peak_fp32_flops_per_s / peak_memory_bytes_per_s." },
      { label: "kernel time per step", value: fmtDuration(e.kernel_time_us_per_step), definition: "Summed kernel durations on this device, per step window." },
      { label: "covered by op groups", value: fmtPercent(e.covered_fraction), sub: "of kernel time", definition: "Share of the kernel time launched by ops with a FLOPs or bytes formula and recorded shapes." },
      ...(peak
        ? [
            { label: "BF16 tensor peak", value: fmtRate(peak.bf16_tensor_flops_per_s, "FLOP/s"), definition: CEILING_NOTE },
            { label: "memory bandwidth", value: fmtRate(peak.memory_bytes_per_s, "B/s"), definition: CEILING_NOTE },
          ]
        : []),
    ]),
  ];
  if (e.headline) out.push(el("p", { className: "headline" }, e.headline));
  const n = notes([...e.notes, CEILING_NOTE]);
  if (n) out.push(n);
  const option = rooflineOption(e, p);
  out.push(
    row(
      col(
        subhead("Roofline", "Each point: one op group (op + shapes + dtype), placed by its arithmetic intensity and achieved FLOP/s, sized by its time; lines: this GPU's roofs."),
        option ? chart(option, "Roofline: achieved FLOP/s against arithmetic intensity, with the GPU's roofs", 340).node : el("p", { className: "muted" }, peak ? "No op group with FLOPs (matmul, convolution, attention)." : "No roofline without the GPU's peaks."),
      ),
    ),
  );
  if (e.rows.length) out.push(subhead("Op groups", "By time per step; click a header to sort."), sortableTable(e.rows));
  return out;
}
