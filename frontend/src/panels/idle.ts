import { chart } from "../charts";
import { el, kpis, nameCell, notes, table } from "../dom";
import { fmtCount, fmtDuration, fmtPercent, isNum } from "../format";
import { DEFINITIONS, IDLE_DEFINITIONS, IDLE_LABELS } from "../labels";
import { histogramOption, idleCausesOption, idlePerStepOption } from "../options";
import { histogramChart, idleCauses, idlePerStep, mainDevice, pythonFrameRows, shortFrame } from "../shape";
import type { PythonFrameRow } from "../shape";
import type { Palette } from "../theme";
import type { IdleDevice, IdleGap, OpIdle, Summary } from "../types";
import { col, row, subhead } from "./shell";

// `onGap`: a "Largest gaps" row's step was clicked (opens the timeline at the gap).
export function idlePanel(s: Summary, p: Palette, deviceKey?: string, onDevice?: (d: string) => void, onGap?: (g: IdleGap) => void): Node[] | string {
  const idle = s.idle;
  if (!idle) return "This summary has no idle-gap data.";
  const devices = idle.devices ?? [];
  if (!devices.length) return "No GPU activity in the step windows, so no GPU idle gaps to measure.";
  const device = (deviceKey !== undefined ? devices.find((d) => String(d.device) === deviceKey) : undefined) ?? mainDevice(devices, idle.main_device);
  if (!device) return "No device.";
  const out: Node[] = [];
  if (devices.length > 1 && onDevice) out.push(devicePicker(devices, device, onDevice));
  const steps = device.per_step?.length ?? 0;
  out.push(
    kpis([
      {
        label: "GPU idle",
        value: fmtPercent(device.idle_fraction),
        sub: "of step time",
        definition: DEFINITIONS.idle_fraction,
        tone: isNum(device.idle_fraction) ? (device.idle_fraction > 0.5 ? "bad" : device.idle_fraction > 0.2 ? "warn" : "good") : "",
      },
      { label: "idle per step", value: fmtDuration(device.idle_us_per_step), definition: DEFINITIONS.idle_us_per_step },
      { label: "idle gaps", value: fmtCount(device.gap_count), sub: `total over ${fmtCount(steps)} steps`, definition: "Maximal intervals inside step windows with no kernel, memcpy or memset on this GPU, all steps." },
      {
        label: "gaps opened by a sync",
        value: fmtCount(device.sync_opened_gaps),
        sub: `total over ${fmtCount(steps)} steps`,
        definition: "Gaps that opened as a host synchronisation returned; their whole length counts as host sync.",
      },
    ]),
  );
  const causes = idleCauses(device, idle.cause_order);
  const perStep = idlePerStep(device, idle.cause_order);
  const anyIdle = causes.some((c) => c.us > 0);
  if (anyIdle) {
    const shown = causes.filter((c) => c.us > 0);
    out.push(
      row(
        col(
          subhead("Idle by cause", "Per step: idle time with each cause ÷ number of steps; label: share of all idle time."),
          chart(idleCausesOption(shown, steps, p), "GPU idle time per step by cause", Math.max(150, 50 + 30 * shown.length)).node,
          table(
            [
              { header: "Cause", cell: (c) => el("span", null, el("span", { className: `swatch idle-${c.key}` }), c.label), cellTitle: (c) => IDLE_DEFINITIONS[c.key] },
              { header: "Per step", numeric: true, title: "Idle time with this cause ÷ number of steps.", cell: (c) => fmtDuration(steps ? c.us / steps : c.us) },
              { header: "Of idle", numeric: true, title: DEFINITIONS.fraction_of_idle, cell: (c) => fmtPercent(c.fractionOfIdle) },
              { header: "Of step time", numeric: true, title: DEFINITIONS.fraction_of_step_time, cell: (c) => fmtPercent(c.fractionOfStep) },
            ],
            causes,
          ),
        ),
        col(
          subhead("Idle per step", "GPU idle time inside each step window, stacked by cause."),
          perStep.steps.length ? chart(idlePerStepOption(perStep, p), "GPU idle time per step, stacked by cause", 300).node : el("p", { className: "muted" }, "No steps."),
        ),
      ),
    );
  } else {
    out.push(el("div", { className: "state empty ok" }, "This GPU never idles inside the step windows."));
  }
  const extra = hostDetail(device, steps);
  if (extra) out.push(extra);
  out.push(pythonFrames(device, steps, idle.python_stacks === true));
  const hist = histogramChart(device.gap_histogram);
  const gaps = device.largest_gaps ?? [];
  out.push(
    row(
      col(
        subhead("Gap lengths", "Idle time per step in gaps of each length (log-spaced bins): the longest bars are the gaps that cost the most."),
        hist.labels.length
          ? chart(
              histogramOption(hist, p, { noun: "gaps", axis: "gap length", scope: "Idle gaps inside step windows.", bars: "time", steps }),
              "Histogram of idle time per step by gap length, with the number of gaps",
            ).node
          : el("p", { className: "muted" }, "No gaps."),
        el(
          "p",
          { className: "legend-note" },
          el("span", { className: "swatch accent" }),
          "idle time per step",
          el("span", { className: "swatch line" }),
          `number of gaps, total over ${fmtCount(steps)} steps (right axis)`,
        ),
      ),
      col(
        subhead("Largest gaps", "The longest idle gaps and what the launching host thread was doing."),
        gaps.length
          ? table<IdleGap>(
              [
                {
                  header: "Step",
                  title: "Click to open the timeline at this gap.",
                  cell: (g) => {
                    if (!isNum(g.step)) return "n/a";
                    if (!onGap) return `#${g.step}`;
                    const b = el("button", { type: "button", className: "link gap-open", title: "Open the timeline of this step at this gap, highlighted." }, `#${g.step}`);
                    b.addEventListener("click", () => onGap(g));
                    return b;
                  },
                },
                { header: "At", numeric: true, title: "Start of the gap, from the start of its step.", cell: (g) => fmtDuration(g.offset_us) },
                { header: "Length", numeric: true, title: "Duration of the idle gap.", cell: (g) => fmtDuration(g.length_us) },
                {
                  header: "Cause",
                  cell: (g) => el("span", null, el("span", { className: `swatch idle-${g.cause ?? ""}` }), IDLE_LABELS[g.cause ?? ""] ?? g.cause ?? "n/a", g.opened_by_sync && g.cause !== "host_sync" ? " (opened by a sync)" : ""),
                  cellTitle: (g) => gapCauseTitle(g),
                },
                ...(idle.python_stacks
                  ? [
                      {
                        header: "Python",
                        className: "name-col",
                        title: "The user Python frame of the launching thread that held most of the gap (library frames folded into it).",
                        cell: (g: IdleGap) => (g.python_frame ? nameCell(shortFrame(g.python_frame), g.python_frame) : "none recorded"),
                      },
                    ]
                  : []),
                {
                  header: "Host was in",
                  className: "name-col",
                  title: "The op on the launching thread during the gap (outermost / innermost).",
                  cell: (g) => nameCell(g.innermost_op ?? g.op ?? "nothing recorded", [g.op, g.innermost_op].filter(Boolean).join(" › ")),
                },
              ],
              gaps,
              { limit: 10 },
            )
          : el("p", { className: "muted" }, "No gaps."),
      ),
    ),
  );
  const n = notes(idle.notes);
  if (n) out.push(n);
  return out;
}

// "Python the host was in while the GPU idled": frames by idle time per step, each
// expandable (a <details>) to the call paths that led to it.
function pythonFrames(device: IdleDevice, steps: number, hasStacks: boolean): HTMLElement {
  const head = subhead(
    "Python the host was in while the GPU idled",
    "Per frame: GPU idle time while the launching thread was in this user Python function (library, torch and standard-library frames folded into the nearest user frame) ÷ number of steps.",
  );
  if (!hasStacks) {
    return col(
      head,
      el("p", { className: "muted" }, "This trace has no Python stacks: record with torch.profiler.profile(with_stack=True) to see which Python functions the GPU waited for."),
    );
  }
  const rows = pythonFrameRows(device);
  if (!rows.length) return col(head, el("p", { className: "muted" }, "No recorded Python frame on the launching threads during the idle gaps."));
  return col(
    head,
    table<PythonFrameRow>(
      [
        { header: "Function", className: "name-col", title: "As Kineto names it: file(first line): function.", cell: (r) => nameCell(r.short, r.frame) },
        { header: "Per step", numeric: true, title: "GPU idle time while the host was in this frame ÷ number of steps.", cell: (r) => fmtDuration(r.perStepUs) },
        { header: "Of idle", numeric: true, title: DEFINITIONS.fraction_of_idle, cell: (r) => fmtPercent(r.fractionOfIdle) },
        {
          header: "Mostly",
          title: "The idle cause holding most of this frame's idle time.",
          cell: (r) => (r.mainCause ? el("span", null, el("span", { className: `swatch idle-${r.mainCause}` }), IDLE_LABELS[r.mainCause] ?? r.mainCause) : "n/a"),
        },
        {
          header: "After a sync",
          numeric: true,
          title: "Per step: idle in gaps opened by a host synchronisation, spent after the host left the frame that synchronised.",
          cell: (r) => (r.afterSyncUs > 0 ? fmtDuration(steps ? r.afterSyncUs / steps : r.afterSyncUs) : "–"),
        },
        { header: "Per step, each", numeric: true, title: "Idle in this frame in each profiled step.", cell: (r) => r.perStepUsList.map((v) => fmtDuration(v)).join(" · ") },
        { header: "Called from", className: "name-col", cell: (r) => callersCell(r, steps) },
      ],
      rows,
      { limit: 10 },
    ),
  );
}

function callersCell(r: PythonFrameRow, steps: number): Node {
  if (!r.callers.length || r.callers.every((c) => !c.path.length)) return el("span", { className: "muted" }, "(outermost)");
  const details = el("details", null, el("summary", null, `${r.callers.length} call path${r.callers.length > 1 ? "s" : ""}`));
  const list = el("ol", { className: "callers" });
  for (const c of r.callers) {
    list.append(el("li", { title: c.path.join("\n") }, `${fmtDuration(steps ? c.us / steps : c.us)} per step: `, c.path.map(shortFrame).join(" ‹ ") || "(outermost)"));
  }
  details.append(list);
  return details;
}

function gapCauseTitle(g: IdleGap): string {
  const parts = Object.entries(g.causes_us ?? {})
    .filter(([, v]) => isNum(v) && v > 0)
    .map(([k, v]) => `${IDLE_LABELS[k] ?? k}: ${fmtDuration(v)}`);
  return parts.length ? `Split of this gap: ${parts.join(", ")}` : "";
}

function devicePicker(devices: IdleDevice[], current: IdleDevice, onDevice: (d: string) => void): HTMLElement {
  const select = el("select", { className: "device-select", title: "The GPU this panel describes." });
  for (const d of devices) {
    select.append(el("option", { value: String(d.device), selected: d === current }, `GPU ${d.device} — idle ${fmtPercent(d.idle_fraction)}`));
  }
  select.addEventListener("change", () => onDevice(select.value));
  return el("label", { className: "picker" }, "Device ", select);
}

const MODE_WORDS: Record<string, string> = {
  per_parameter: "one parameter at a time (a kernel chain per tensor)",
  foreach: "foreach (multi_tensor_apply)",
  fused: "fused",
  compiled: "compiled (Triton)",
  none: "no GPU kernel",
};

/** The ops holding the "other CPU ops" idle, and what the optimizer step costs. */
function hostDetail(device: IdleDevice, steps: number): Node | null {
  const per = (us: number) => fmtDuration(steps ? us / steps : us);
  const ops = device.cpu_ops_top ?? [];
  const opt = device.optimizer;
  const cols: Node[] = [];
  if (ops.length) {
    cols.push(
      col(
        subhead("Other CPU ops: which", "The outermost CPU ops on the launching thread during the idle attributed to other CPU ops, most idle first."),
        table<OpIdle>(
          [
            { header: "Op", className: "name-col", cell: (o) => nameCell(o.name, o.name) },
            { header: "Idle per step", numeric: true, title: "GPU idle overlapping this op ÷ number of steps.", cell: (o) => per(o.us) },
            { header: "Of step time", numeric: true, title: DEFINITIONS.fraction_of_step_time, cell: (o) => fmtPercent(o.fraction_of_step_time) },
          ],
          ops,
        ),
      ),
    );
  }
  if (opt && opt.cost_us > 0) {
    cols.push(
      col(
        subhead("Optimizer step", "GPU idle while the host is in Optimizer.step / zero_grad, plus the GPU work launched from inside it."),
        kpis([
          { label: "optimizer step", value: fmtPercent(opt.cost_fraction_of_step_time), sub: `of step time, ${per(opt.cost_us)} per step`, definition: "(GPU idle in the optimizer step + its GPU work) ÷ step time." },
          { label: "GPU idle in it", value: per(opt.idle_us), sub: "per step", definition: "GPU idle while the launching thread is inside the optimizer step." },
          { label: "kernels", value: fmtCount(opt.kernels_per_step), sub: "per step", definition: "Kernels launched from inside the optimizer step." },
          { label: "runs", value: MODE_WORDS[opt.mode] ?? opt.mode, definition: "Read from its kernels: multi_tensor_apply = foreach, a fused kernel = fused, Triton = compiled, else one kernel chain per parameter." },
        ]),
      ),
    );
  }
  if (!cols.length) return null;
  return row(...cols);
}
