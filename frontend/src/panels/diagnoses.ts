// Diagnoses first: severity, title, the numbers that triggered it, what to do; a click
// scrolls to the panel with the details.

import { badge, el } from "../dom";
import { DIAGNOSIS_NAMES } from "../labels";
import { evidenceItems, panelForDiagnosis, sortDiagnoses } from "../shape";
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
export function diagnosesList(list: Diagnosis[] | undefined, go: (panel: string) => void, allRanks = false, stepCount?: number): HTMLElement[] {
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
  return sorted.map((d) => card(d, go, allRanks, stepCount));
}

function card(d: Diagnosis, go: (panel: string) => void, allRanks: boolean, stepCount?: number): HTMLElement {
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
      title: `${DIAGNOSIS_NAMES[d.id] ?? d.id} (${d.id}): click to open the ${PANEL_NAMES[target] ?? target} panel`,
    },
    el(
      "div",
      { className: "diagnosis-head" },
      badge(d.severity, d.severity, `Severity: ${d.severity}`),
      el("span", { className: "diagnosis-title" }, d.title),
    ),
    evidence.length
      ? el(
          "dl",
          { className: "evidence" },
          ...evidence.flatMap((e) => [
            el("dt", { title: e.definition }, e.label),
            el("dd", { title: e.definition, dataset: { key: e.key } }, e.text),
          ]),
        )
      : null,
    d.recommendation ? el("p", { className: "recommendation" }, el("strong", null, "What to do: "), d.recommendation) : null,
    open,
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
