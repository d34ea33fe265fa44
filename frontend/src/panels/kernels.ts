import { chart } from "../charts";
import { el, kpis, nameCell, notes, table } from "../dom";
import { fmtCount, fmtDuration, fmtPercent, isNum, shortenNames } from "../format";
import { DEFINITIONS } from "../labels";
import { histogramOption, kernelsPerStepOption } from "../options";
import { histogramChart } from "../shape";
import type { Palette } from "../theme";
import type { Num } from "../answers";
import type { FusionCandidate, KernelRow, Summary } from "../types";
import { col, row, subhead } from "./shell";

export function kernelsPanel(s: Summary, p: Palette): Node[] | string {
  const k = s.kernels;
  if (!k) return "This summary has no kernel data.";
  if (!k.count) return "No GPU kernels in this trace (a CPU-only profile, or CUDA activities were not recorded).";
  const shortUs = isNum(k.short_threshold_us) ? k.short_threshold_us : 10;
  const shortLabel = `Shorter than ${fmtDuration(shortUs)}`;
  const launchBound = k.launch?.launch_bound_fraction;
  const out: Node[] = [
    kpis([
      { label: "kernels per step", value: fmtCount(k.mean_per_step), definition: DEFINITIONS.kernels_per_step },
      {
        label: `short kernels (<${fmtDuration(shortUs)})`,
        value: fmtPercent(k.short_count_fraction),
        sub: "of kernels",
        definition: DEFINITIONS.short_count_fraction,
        tone: isNum(k.short_count_fraction) && k.short_count_fraction >= 0.5 ? "bad" : "",
      },
      {
        label: "time in short kernels",
        value: fmtPercent(k.short_time_fraction),
        sub: "of kernel time",
        definition: DEFINITIONS.short_time_fraction,
      },
      {
        label: "launch-bound kernels",
        value: fmtPercent(launchBound),
        sub: "kernel shorter than its launch",
        definition: k.launch?.launch_bound_denominator
          ? `Kernels shorter than the runtime call that launched them ÷ ${k.launch.launch_bound_denominator}.`
          : DEFINITIONS.launch_bound_fraction,
        tone: isNum(launchBound) && launchBound >= 0.5 ? "warn" : "",
      },
      { label: "mean launch call", value: fmtDuration(k.launch?.mean_launch_us), definition: DEFINITIONS.mean_launch_us },
      {
        label: "kernels in the trace",
        value: fmtCount(k.count),
        sub: k.graph_launched_count ? `${fmtCount(k.graph_launched_count)} from CUDA graphs` : undefined,
        definition: "Every kernel of the trace, inside or outside the step windows.",
      },
    ]),
  ];
  const hist = histogramChart(k.duration_histogram, shortUs);
  out.push(
    row(
      col(
        subhead("Kernel duration histogram", "Kernels that start in a step window, by duration (log-spaced bins), all steps together."),
        hist.labels.length
          ? chart(
              histogramOption(hist, p, { noun: "kernels", axis: "kernel duration", scope: "Kernels starting in a step window, all steps.", steps: s.steps?.count ?? undefined }),
              `Histogram of kernel durations; bins shorter than ${fmtDuration(shortUs)} highlighted`,
            ).node
          : el("p", { className: "muted" }, "No kernels in the step windows."),
        el(
          "p",
          { className: "legend-note" },
          el("span", { className: "swatch short" }),
          `shorter than ${fmtDuration(shortUs)} (short)`,
          el("span", { className: "swatch accent" }),
          "longer",
          el("span", { className: "swatch line" }),
          "share of kernel time (right axis)",
        ),
      ),
      col(
        subhead("Kernels per step", "Kernels starting in each step window; the short ones at the bottom."),
        k.per_step?.length
          ? chart(kernelsPerStepOption(k.per_step, p, shortLabel), "Kernels per step, short and other").node
          : el("p", { className: "muted" }, "No steps."),
      ),
    ),
  );
  // The table rows count kernels of the step windows (all steps): per step = ÷ steps.
  const stepCount = s.steps?.count;
  const nSteps = isNum(stepCount) && stepCount > 0 ? stepCount : (k.per_step?.length ?? 0);
  const perStep = (v: Num): Num => (isNum(v) && nSteps > 0 ? v / nSteps : null);
  // names cut in the middle where alike ones differ (format.shortenNames), full on hover
  const listed = [...(k.top_by_time ?? []), ...(k.top_by_count ?? [])].map((r) => r.name);
  const cut = shortenNames(listed);
  const shown = new Map(listed.map((name, i) => [name, cut[i]]));
  const kernelColumns = [
    { header: "Kernel", className: "name-col", cell: (r: KernelRow) => nameCell(shown.get(r.name) ?? r.name, r.full_name ?? r.name) },
    { header: "Count /step", numeric: true, title: `Launches that start in a step window ÷ ${fmtCount(nSteps)} steps.`, cell: (r: KernelRow) => fmtCount(perStep(r.count), 1) },
    { header: "Time /step", numeric: true, title: `Summed kernel duration in the step windows ÷ ${fmtCount(nSteps)} steps.`, cell: (r: KernelRow) => fmtDuration(perStep(r.time_us)) },
    { header: "Mean", numeric: true, title: "Mean duration of one launch: total time ÷ count.", cell: (r: KernelRow) => fmtDuration(r.mean_us) },
    {
      header: "Short",
      numeric: true,
      title: `Launches shorter than ${fmtDuration(shortUs)} ÷ launches of this kernel.`,
      cell: (r: KernelRow) => fmtPercent(r.short_fraction, 0),
    },
    { header: `Time, total (${fmtCount(nSteps)} steps)`, numeric: true, title: "Summed kernel duration over all the step windows.", cell: (r: KernelRow) => fmtDuration(r.time_us) },
  ];
  const tables = el("div", { className: "row" });
  tables.append(
    col(subhead("Top kernels by time", "Kernel names with template arguments folded (<…>); hover for the full name, click to open it in full and copy it."), table(kernelColumns, k.top_by_time ?? [], { limit: 10 })),
    col(subhead("Top kernels by count"), table(kernelColumns, k.top_by_count ?? [], { limit: 10 })),
  );
  out.push(tables);
  out.push(subhead("Fusion candidates", "Runs of consecutive short kernels that repeat within the profiled steps: one fused kernel (torch.compile, a fused optimizer) could replace each run."));
  const fusion = k.fusion_candidates ?? [];
  if (fusion.length) {
    out.push(
      table<FusionCandidate>(
        [
          {
            header: "Sequence",
            className: "name-col",
            cell: (r) => sequenceCell(r),
          },
          { header: "Kernels", numeric: true, title: "Kernels in one run of the sequence.", cell: (r) => fmtCount(r.length) },
          { header: "Repeats", numeric: true, title: "How often the run recurs in the profiled steps.", cell: (r) => fmtCount(r.occurrences) },
          { header: "Per step", numeric: true, title: "Repeats ÷ number of steps.", cell: (r) => fmtCount(r.per_step, 2) },
          { header: "Time, total", numeric: true, title: "Summed kernel time of all repeats, over all the profiled steps.", cell: (r) => fmtDuration(r.total_time_us) },
          { header: "From CPU op", cell: (r) => (r.cpu_op ? nameCell(r.cpu_op) : "n/a"), title: "The CPU op that launched most of the run." },
        ],
        fusion,
        { limit: 6 },
      ),
    );
  } else {
    out.push(el("p", { className: "muted" }, "No repeated runs of short kernels."));
  }
  const n = notes(k.notes);
  if (n) out.push(n);
  return out;
}

function sequenceCell(r: FusionCandidate): HTMLElement {
  const names = r.kernels ?? [];
  // Collapse repeats of one name: "elementwise_kernel<…> ×16".
  const parts: string[] = [];
  let i = 0;
  while (i < names.length) {
    let j = i;
    while (j < names.length && names[j] === names[i]) j += 1;
    parts.push(j - i > 1 ? `${names[i]} ×${j - i}` : names[i]);
    i = j;
  }
  const more = r.truncated && isNum(r.length) && r.length > names.length ? ` … (+${r.length - names.length} more)` : "";
  const text = parts.slice(0, 4).join(" → ") + (parts.length > 4 ? " → …" : "") + more;
  return nameCell(text, names.join("\n") + (more ? `\n${more.trim()}` : ""));
}
