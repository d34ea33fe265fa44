import { chart } from "../charts";
import { el, kpis, nameCell, notes, table } from "../dom";
import { fmtBytes, fmtCount, fmtDuration, fmtPercent, isNum } from "../format";
import type { Kpi } from "../dom";
import { DEFINITIONS } from "../labels";
import { memoryOption, memoryPerStepOption } from "../options";
import { MEMORY_DEVICE_MIN_BYTES, defaultMemoryDevice, memoryChart, memoryDeviceChoice, stepBoundariesMs } from "../shape";
import type { Palette } from "../theme";
import type { MemoryDevice, Summary } from "../types";
import { col, row, subhead } from "./shell";

export function memoryPanel(s: Summary, p: Palette, deviceKey?: string, onDevice?: (d: string) => void): Node[] | string {
  const mem = s.memory;
  if (!mem) return "This summary has no memory data.";
  const devices = (mem.devices ?? []).filter((d) => (d.event_count ?? 0) > 0 || d.series?.allocated?.t_us?.length);
  if (!devices.length) {
    return "No memory events: profile with profile_memory=True to see allocations.";
  }
  const device = devices.find((d) => d.device === deviceKey) ?? defaultMemoryDevice(devices, mem.main_device) ?? devices[0];
  const out: Node[] = [];
  const { offered, tooSmall } = memoryDeviceChoice(devices, device);
  if (offered.length > 1 && onDevice) out.push(devicePicker(offered, device, onDevice));
  if (tooSmall.length) {
    out.push(
      el(
        "p",
        { className: "note memory-small-devices" },
        `Also recorded, too little to chart (under ${fmtBytes(MEMORY_DEVICE_MIN_BYTES)} allocated at peak): `,
        tooSmall.map((d) => `${d.device} (${fmtBytes(d.peak_allocated_bytes)})`).join(", "),
        ".",
      ),
    );
  }
  const growth = device.growth ?? {};
  const growing = Boolean(growth.steady) && isNum(growth.bytes_per_step) && growth.bytes_per_step > 0;
  const live = device.live_at_end;
  out.push(
    kpis([
      { label: "peak allocated", value: fmtBytes(device.peak_allocated_bytes), sub: isNum(device.peak_allocated_us) ? `at ${fmtDuration(device.peak_allocated_us)}` : undefined, definition: "Highest allocated memory seen (Total Allocated of the [memory] events)." },
      { label: "peak reserved", value: fmtBytes(device.peak_reserved_bytes), sub: isNum(device.peak_fraction_of_capacity) ? `${fmtPercent(device.peak_fraction_of_capacity)} of ${fmtBytes(device.capacity_bytes)}` : undefined, definition: `Highest memory reserved by the caching allocator. ${DEFINITIONS.peak_fraction_of_capacity}` },
      {
        label: "growth per step",
        value: isNum(growth.bytes_per_step) ? `${fmtBytes(growth.bytes_per_step)}/step` : "n/a",
        sub: isNum(growth.r2) ? `r² ${growth.r2.toFixed(2)} over ${fmtCount(growth.steps_used)} steps` : undefined,
        definition: `${DEFINITIONS.bytes_per_step} ${DEFINITIONS.r2}`,
        tone: growing ? "bad" : "",
      },
      { label: "cached, not allocated", value: fmtPercent(device.cached_free_at_reserved_peak_fraction), definition: DEFINITIONS.cached_free_at_reserved_peak_fraction },
      fragmentationKpi(device),
      { label: "live at end", value: fmtBytes(live?.bytes), sub: `${fmtCount(live?.count)} allocations`, definition: DEFINITIONS.live_at_end_bytes, tone: isNum(live?.bytes) && live.bytes > 0 && growing ? "bad" : "" },
    ]),
  );
  const data = memoryChart(device);
  if (data.allocated.length) {
    out.push(
      subhead(`Memory over time — ${device.device}`, "Allocated (by tensors) and reserved (by the caching allocator), down-sampled with peaks kept; dashed lines are step starts. Drag or scroll to zoom."),
      chart(memoryOption(data, stepBoundariesMs(s.steps), p), `Allocated and reserved memory on ${device.device} over time, with step boundaries`, 300).node,
    );
  } else {
    out.push(el("p", { className: "muted" }, "No allocated-memory totals in this trace (an old profiler without Total Allocated)."));
  }
  const perStep = device.per_step ?? [];
  out.push(
    row(
      col(
        subhead("Per step", "Allocated memory at each step's start, its peak within the step, and at its end. Growing end values mean something outlives the step."),
        perStep.length ? chart(memoryPerStepOption(perStep, p), "Allocated memory per step: start, peak and end").node : el("p", { className: "muted" }, "No steps."),
      ),
      col(
        subhead("Still allocated at the end", "Allocations made inside the profiled window and never freed before it ended, grouped by the op that made them."),
        live?.by_op.length
          ? table(
              [
                { header: "Op", className: "name-col", cell: (r) => nameCell(r.op ?? "unknown op", [r.op, r.input_shapes].filter(Boolean).join(" ")) },
                { header: "Shapes", className: "name-col", cell: (r) => nameCell(r.input_shapes ?? "n/a"), title: "Input shapes of the op (record_shapes=True)." },
                { header: "Allocations", numeric: true, cell: (r) => fmtCount(r.count) },
                { header: "Bytes", numeric: true, title: "Bytes still allocated at the end of the window.", cell: (r) => fmtBytes(r.bytes) },
                { header: "Steps", cell: (r) => (r.steps?.length ? r.steps.map((x) => `#${x}`).join(" ") : "n/a"), title: "Steps in which they were allocated." },
              ],
              live.by_op,
              { limit: 8 },
            )
          : el("div", { className: "state empty ok" }, "Nothing allocated in the window is still alive at its end."),
      ),
    ),
  );
  const largest = device.largest_allocations ?? [];
  if (largest.length) {
    out.push(
      subhead("Largest allocations"),
      table(
        [
          { header: "Bytes", numeric: true, cell: (r) => fmtBytes(r.bytes) },
          { header: "Op", className: "name-col", cell: (r) => nameCell(r.op ?? "unknown op") },
          { header: "Shapes", className: "name-col", cell: (r) => nameCell(r.input_shapes ?? "n/a"), title: "Input shapes of the op." },
          { header: "Step", cell: (r) => (isNum(r.step) ? `#${r.step}` : "n/a") },
          { header: "Lifetime", numeric: true, title: "From allocation to free; open when never freed in the window.", cell: (r) => (r.freed ? fmtDuration(r.lifetime_us) : "still alive") },
        ],
        largest,
        { limit: 5 },
      ),
    );
  }
  const n = notes([...(device.notes ?? []), ...(mem.notes ?? [])]);
  if (n) out.push(n);
  return out;
}

function devicePicker(devices: MemoryDevice[], current: MemoryDevice, onDevice: (d: string) => void): HTMLElement {
  const select = el("select", { className: "device-select", title: "The device this panel describes." });
  for (const d of devices) {
    select.append(el("option", { value: d.device, selected: d === current }, `${d.device} — peak ${fmtBytes(d.peak_allocated_bytes)}`));
  }
  select.addEventListener("change", () => onDevice(select.value));
  return el("label", { className: "picker" }, "Device ", select);
}

// New segments reserved while the cache held enough free bytes: the evidence for
// fragmentation (the cached-but-unallocated share alone is the allocator's cache).
function fragmentationKpi(device: MemoryDevice): Kpi {
  const f = device.fragmentation;
  if (!f) return { label: "fragmentation", value: "n/a", definition: "No Total Reserved in the [memory] events: fragmentation cannot be judged." };
  const steady = f.steady_state_steps ?? [];
  const excess = f.excess_reserved_growth_bytes_per_step;
  // the diagnosis's numbers: the steady-state steps' count (the first profiled step may
  // still be warming the cache up; its events are in the per-step counts only)
  return {
    label: `new segments despite cache, total (${fmtCount(steady.length)} steady-state ${steady.length === 1 ? "step" : "steps"})`,
    value: fmtCount(f.steady_state_events),
    sub: steady.length
      ? `reserved +${fmtBytes(f.steady_state_reserved_growth_bytes)} in them; +${fmtBytes(excess)}/step beyond allocated`
      : undefined,
    definition: DEFINITIONS.fragmentation_events,
    tone: isNum(f.steady_state_events) && f.steady_state_events > 0 ? "warn" : "",
  };
}
