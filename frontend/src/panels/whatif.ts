// "What if": each recommended fix with the step time it would give (replayed on the
// step's dependency graph), the top fixes together, and what the step waits on (its
// critical path). Every number comes from summary.what_if / summary.critical_path.

import { chart } from "../charts";
import { el, muted, table } from "../dom";
import { fmtDuration, fmtPercent } from "../format";
import { DIAGNOSIS_NAMES } from "../labels";
import { type WhatIfBar, whatIfOption } from "../options";
import type { Palette } from "../theme";
import type { CriticalPathItem, Diagnosis, Summary, WhatIfFix } from "../types";
import { subhead } from "./shell";

const CLASS_LABELS: Record<string, string> = {
  compute: "GPU compute",
  communication: "Communication",
  copy: "Copies (memcpy, memset)",
  dependency: "Waiting for another stream",
  launch: "Launch overhead",
  sync: "Sync calls",
  allocator: "cudaMalloc / cudaFree",
  runtime: "Other runtime calls",
  data_loading: "DataLoader",
  optimizer: "Optimizer step (host)",
  cpu_ops: "CPU ops (host)",
  untraced: "Host, untraced (Python)",
};

// openDiagnosis: scrolls to a diagnosis card; moment: opens the timeline at a
// diagnosis' moment (null where it has none).
export function whatIfSection(
  s: Summary,
  p: Palette,
  openDiagnosis: (id: string) => void,
  moment: (d: Diagnosis) => (() => void) | null,
): Node[] {
  const w = s.what_if;
  if (!w || w.actual_step_us === null || !w.fixes.length) return [];
  const bars: WhatIfBar[] = [
    { label: "Now", us: w.actual_step_us, kind: "now", speedup: null, method: "measured" },
    ...w.fixes.map((f) => ({ label: `${DIAGNOSIS_NAMES[f.diagnosis] ?? f.diagnosis}: ${f.fix}`, us: f.predicted_step_us, kind: "fix" as const, speedup: f.speedup, method: f.method })),
  ];
  const c = w.combined;
  if (c) bars.push({ label: `Together: ${c.diagnoses.map((id) => DIAGNOSIS_NAMES[id] ?? id).join(" + ")}`, us: c.predicted_step_us, kind: "combined", speedup: c.speedup, method: "replay" });
  const byId = new Map((s.diagnoses ?? []).map((d) => [d.id, d]));
  const out: Node[] = [
    subhead(
      "What if",
      "Each fix the diagnoses recommend, with the step time it would give: the step's dependency graph (host threads, streams, launches, syncs) replayed with the fix applied. The top fixes are replayed together, not added up.",
    ),
  ];
  const box = chart(whatIfOption(bars, p), "Step time now, with each recommended fix, and with the top fixes together", 48 + 30 * bars.length, undefined, (_series, dataIndex) => {
    const i = bars.length - 1 - dataIndex;
    const fix = i > 0 && i <= w.fixes.length ? w.fixes[i - 1] : null;
    if (fix) openDiagnosis(fix.diagnosis);
  });
  out.push(box.node);
  out.push(
    table<WhatIfFix>(
      [
        { header: "Fix", cell: (f) => el("span", null, el("strong", null, DIAGNOSIS_NAMES[f.diagnosis] ?? f.diagnosis), `: ${f.fix}`) },
        { header: "Step", numeric: true, title: "Predicted mean steady-state step time with this fix.", cell: (f) => `${fmtDuration(w.actual_step_us)} → ${fmtDuration(f.predicted_step_us)}` },
        { header: "Speed-up", numeric: true, cell: (f) => `${f.speedup.toFixed(2)}×` },
        { header: "How", cell: (f) => (f.method === "replay" ? "replayed" : "estimated") },
        {
          header: "",
          cell: (f) => {
            const links: Node[] = [];
            const card = el("button", { type: "button", className: "link goto", title: "The diagnosis that recommends this fix." }, "Diagnosis →");
            card.addEventListener("click", () => openDiagnosis(f.diagnosis));
            links.push(card);
            const d = byId.get(f.diagnosis);
            const open = d ? moment(d) : null;
            if (open) {
              const b = el("button", { type: "button", className: "link goto moment", title: "Open the timeline at this diagnosis' moment." }, "On the timeline →");
              b.addEventListener("click", open);
              links.push(el("span", { className: "sep" }, " · "), b);
            }
            return el("span", { className: "what-if-links" }, ...links);
          },
        },
      ],
      w.fixes,
    ),
  );
  if (c) out.push(muted(`Together (${c.diagnoses.length} fixes, replayed at once): ${fmtDuration(w.actual_step_us)} → ${fmtDuration(c.predicted_step_us)} (${c.speedup.toFixed(2)}×).`));
  for (const note of w.notes) out.push(muted(note));
  return [el("section", { className: "what-if", id: "ki-what-if" }, ...out)];
}

// Overview: what the steady steps wait on, end to end.
export function criticalPathSection(s: Summary): Node[] {
  const cp = s.critical_path;
  if (!cp || !cp.steps.length || cp.mean_length_us === null) return cp?.notes.length ? [subhead("Critical path"), muted(cp.notes.join(" "))] : [];
  const rows = Object.entries(cp.mean_by_class_us)
    .filter((e): e is [string, number] => typeof e[1] === "number" && e[1] > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([klass, us]) => ({ klass, us, fraction: cp.fraction_by_class[klass] ?? null }));
  return [
    subhead(
      "Critical path",
      "The chain of work that set each steady step's end, walked back to its start: shortening anything off this path does not shorten the step.",
    ),
    table(
      [
        { header: "On the path", cell: (r) => CLASS_LABELS[r.klass] ?? r.klass },
        { header: "Per step", numeric: true, cell: (r) => fmtDuration(r.us) },
        { header: "Share", numeric: true, title: "Time on the path ÷ mean step time.", cell: (r) => fmtPercent(r.fraction) },
      ],
      rows,
    ),
    ...(cp.top.length
      ? [
          table<CriticalPathItem>(
            [
              { header: "GPU work on the path", cell: (t) => t.name },
              { header: "Kind", cell: (t) => CLASS_LABELS[t.klass] ?? t.klass },
              { header: "Per step", numeric: true, cell: (t) => fmtDuration(t.us_per_step) },
            ],
            cp.top,
          ),
        ]
      : []),
  ];
}
