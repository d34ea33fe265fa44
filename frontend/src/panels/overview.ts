import { chart } from "../charts";
import { el, kpis, muted, table } from "../dom";
import { fmtCount, fmtDuration, fmtMs, fmtPercent, isNum } from "../format";
import { BREAKDOWN_DEFINITIONS, DEFINITIONS } from "../labels";
import { overviewOption } from "../options";
import { breakdownChart, breakdownShares } from "../shape";
import type { Palette } from "../theme";
import type { Step, Summary } from "../types";
import { col, row, subhead } from "./shell";
import { criticalPathSection } from "./whatif";

export function overviewPanel(s: Summary, p: Palette): Node[] | string {
  const steps = s.steps;
  if (!steps) return "This summary has no step data.";
  const out: Node[] = [];
  if (!steps.has_markers) {
    out.push(
      el(
        "div",
        { className: "state warning" },
        "No ProfilerStep#N markers: the whole trace is one pseudo-step. Call prof.step() once per training step for per-step numbers.",
      ),
    );
  }
  if (steps.left_out_note) {
    out.push(el("div", { className: "state warning left-out" }, `${steps.left_out_note}: left out of every step figure.`));
  }
  const util = steps.gpu_utilization_fraction;
  out.push(
    kpis([
      {
        label: "mean step time",
        value: fmtDuration(steps.mean_step_us),
        sub: isNum(steps.std_step_us) ? `± ${fmtDuration(steps.std_step_us)} (std. dev.)` : undefined,
        definition: `${DEFINITIONS.mean_step_us} Mean over ${fmtCount(steps.count)} steady-state steps.`,
      },
      {
        label: "GPU utilization",
        value: fmtPercent(util),
        definition: DEFINITIONS.gpu_utilization_fraction,
        tone: isNum(util) ? (util < 0.25 ? "bad" : util < 0.5 ? "warn" : "good") : "",
      },
      {
        label: "steady-state steps",
        value: steps.left_out?.length ? `${fmtCount(steps.count)} of ${fmtCount(steps.count + steps.left_out.length)}` : fmtCount(steps.count),
        definition: DEFINITIONS.steady_state_steps,
      },
      {
        label: "min / max step",
        value: `${fmtDuration(steps.min_step_us)} / ${fmtDuration(steps.max_step_us)}`,
        definition: "Shortest and longest step window of this span.",
      },
    ]),
  );
  const data = breakdownChart(steps);
  if (data.steps.length) {
    out.push(
      chart(
        overviewOption(data, p),
        "Step time per step, stacked by what the step spent its time on, with GPU utilization",
        300,
      ).node,
    );
  } else {
    out.push(muted("No steps to chart."));
  }
  const shares = breakdownShares(steps);
  out.push(
    row(
      col(
        subhead("Mean step breakdown", "Exclusive: where activities overlap, the first in this order wins (kernel, memcpy, memset, communication, runtime, data loading, CPU exec, other)."),
        table(
          [
            {
              header: "Category",
              cell: (r) => el("span", null, el("span", { className: `swatch bd-${r.key}` }), r.label),
              cellTitle: (r) => BREAKDOWN_DEFINITIONS[r.key],
            },
            { header: "Per step", numeric: true, title: "Mean time per step.", cell: (r) => fmtDuration(r.us) },
            {
              header: "Share",
              numeric: true,
              title: "Time in this category ÷ mean step time (the categories add up to the step).",
              cell: (r) => fmtPercent(r.fraction),
            },
          ],
          shares,
        ),
      ),
      col(
        subhead("Steps"),
        table<Step>(
          [
            { header: "Step", cell: (r) => `#${r.number}` },
            {
              header: "Duration",
              numeric: true,
              title: DEFINITIONS.step_time,
              cell: (r) => fmtMs(r.duration_us),
            },
            {
              header: "CPU range",
              numeric: true,
              title: "Duration of the CPU ProfilerStep#N range alone (without the GPU tail).",
              cell: (r) => fmtMs(r.cpu_duration_us),
            },
            {
              header: "GPU util.",
              numeric: true,
              title: "GPU busy time in this step ÷ this step's duration.",
              cell: (r) => fmtPercent(r.gpu_utilization_fraction),
            },
          ],
          steps.steps ?? [],
          { limit: 12 },
        ),
      ),
    ),
  );
  if ((steps.devices?.length ?? 0) > 1) {
    out.push(
      subhead("GPU utilization per device"),
      table(
        [
          { header: "Device", cell: (d) => `GPU ${d.device}` },
          { header: "Busy", numeric: true, title: "Union of kernels, memcpy and memset inside the step windows.", cell: (d) => fmtDuration(d.busy_us) },
          { header: "Utilization", numeric: true, title: DEFINITIONS.gpu_utilization_fraction, cell: (d) => fmtPercent(d.gpu_utilization_fraction) },
        ],
        steps.devices ?? [],
      ),
    );
  }
  out.push(...criticalPathSection(s));
  return out;
}
