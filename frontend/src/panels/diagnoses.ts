// Diagnoses first: severity, title, the numbers that triggered it, what to do; a click
// scrolls to the panel with the details.

import { badge, el, table } from "../dom";
import { DIAGNOSIS_DEFINITIONS, DIAGNOSIS_NAMES } from "../labels";
import { evidenceItems, panelForDiagnosis, sortDiagnoses } from "../shape";
import type { EvidenceItem, EvidenceTable } from "../shape";
import type { Diagnosis } from "../types";

const PANEL_NAMES: Record<string, string> = {
  overview: "Overview",
  kernels: "Kernel density",
  idle: "Idle gaps",
  communication: "Communication",
  memory: "Memory",
  efficiency: "Efficiency",
  health: "Trace health",
  ranks: "Across ranks",
};

// stepCount: the profiled steps of the span, for evidence given as a total over them.
// moment: for a diagnosis with a place in time, what opens the timeline there (else null).
// openWorker: opens one worker's own panels (a run-level diagnosis about one rank, such
// as the straggler, links to that rank's span); omitted where there is nowhere to go.
export function diagnosesList(
  list: Diagnosis[] | undefined,
  go: (panel: string) => void,
  allRanks = false,
  stepCount?: number,
  moment?: (d: Diagnosis) => (() => void) | null,
  openWorker?: (worker: string) => boolean,
): HTMLElement[] {
  const sorted = sortDiagnoses(list);
  if (!sorted.length) {
    return [
      el(
        "div",
        { className: "state empty ok" },
        "No problem found: no diagnosis crossed its threshold for this trace. The panels below show the details.",
      ),
    ];
  }
  return sorted.map((d) => card(d, go, allRanks, stepCount, moment?.(d) ?? null, openWorker));
}

function momentButton(openMoment: () => void, d: Diagnosis): HTMLElement {
  const m = d.moment;
  const where = m ? `${m.what}: step ${m.step}${m.worker ? ` of ${m.worker}` : ""}` : "";
  const b = el(
    "button",
    { type: "button", className: "link goto moment", title: `Open the timeline at ${where}, highlighted.` },
    "See it on the timeline →",
  );
  b.addEventListener("click", (event) => {
    event.stopPropagation(); // not the card's own jump to its panel
    openMoment();
  });
  return b;
}

// A list of records of the evidence (the largest events, the damaged regions) as a small
// table; names in full on hover.
function recordsTable(t: EvidenceTable): HTMLElement {
  return table<string[]>(
    t.columns.map((c, i) => ({
      header: c.label,
      title: c.definition,
      numeric: c.numeric,
      // the key rides on the cell: what the value's unit is (tests read it)
      cell: (row) => el("span", { dataset: { key: c.key } }, row[i]),
      cellTitle: (row) => row[i],
    })),
    t.rows,
    { className: "evidence-table" },
  );
}

// Evidence items as a definition list (records as small tables).
function evidenceList(items: EvidenceItem[], className: string): HTMLElement | null {
  if (!items.length) return null;
  return el(
    "dl",
    { className },
    ...items.flatMap((e) => [
      el("dt", { title: e.definition }, e.label),
      e.table
        ? el("dd", { className: "evidence-records", dataset: { key: e.key } }, recordsTable(e.table))
        : el("dd", { title: e.definition, dataset: { key: e.key } }, e.text),
    ]),
  );
}

// How the verdict was reached (a test's statistic, thresholds), folded under the numbers
// that say what the job does.
function details(items: EvidenceItem[]): HTMLElement | null {
  const list = evidenceList(items, "evidence evidence-details");
  if (!list) return null;
  const box = el("details", { className: "evidence-more" }, el("summary", null, "How it was decided"), list);
  // opening it is not a click on the card
  box.addEventListener("click", (event) => event.stopPropagation());
  return box;
}

function card(d: Diagnosis, go: (panel: string) => void, allRanks: boolean, stepCount?: number, openMoment: (() => void) | null = null, openWorker?: (worker: string) => boolean): HTMLElement {
  const target = panelForDiagnosis(d.panel, allRanks);
  const evidence = evidenceItems(d.evidence, stepCount);
  const open = el(
    "button",
    { type: "button", className: "link goto", title: `Scroll to the ${PANEL_NAMES[target] ?? target} panel` },
    `See ${PANEL_NAMES[target] ?? target} →`,
  );
  const node = el(
    "article",
    {
      className: `diagnosis sev-${d.severity}`,
      dataset: { diagnosisId: d.id, severity: d.severity, target },
      tabIndex: 0,
      title: `${DIAGNOSIS_NAMES[d.id] ?? d.id} (${d.id}): ${DIAGNOSIS_DEFINITIONS[d.id] ?? ""} Click to open the ${PANEL_NAMES[target] ?? target} panel.`,
    },
    el(
      "div",
      { className: "diagnosis-head" },
      badge(d.severity, d.severity, `Severity: ${d.severity}`),
      el("span", { className: "diagnosis-title" }, d.title),
    ),
    evidenceList(evidence.filter((e) => !e.detail), "evidence"),
    details(evidence.filter((e) => e.detail)),
    d.recommendation ? el("p", { className: "recommendation" }, el("strong", null, "What to do: "), d.recommendation) : null,
    // the actions spaced apart, so that two links never read as one
    el("div", { className: "diagnosis-actions" }, open, openMoment ? momentButton(openMoment, d) : null, spanLink(d, openWorker)),
  );
  const activate = (event: Event) => {
    // selecting text in the card should not jump away
    const selection = window.getSelection?.();
    if (event.type === "click" && selection && selection.toString().length > 0 && event.target !== open) return;
    go(target);
  };
  node.addEventListener("click", activate);
  node.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      go(target);
    }
  });
  return node;
}

// The straggler's own span: where its idle gaps and kernels show why it is late.
function spanLink(d: Diagnosis, openWorker?: (worker: string) => boolean): HTMLElement | null {
  const worker = d.evidence?.worker;
  if (!openWorker || d.id !== "communication_straggler" || typeof worker !== "string") return null;
  const rank = d.evidence?.rank;
  const link = el(
    "button",
    { type: "button", className: "link goto open-span", title: `Open the panels of worker ${worker}` },
    `Open rank ${typeof rank === "number" ? rank : worker}'s span →`,
  );
  link.addEventListener("click", (event) => {
    event.stopPropagation();
    openWorker(worker);
  });
  return link;
}
