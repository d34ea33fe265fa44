// Chart tooltips built as DOM nodes (ECharts accepts an HTMLElement from a formatter),
// so series and category names — kernel names with `<` and `>` — are text, never HTML.
// `document` is only touched when a tooltip is shown, so option builders stay testable
// in Node.

export interface TipRow {
  color?: string;
  label: string;
  value: string;
  strong?: boolean;
}

export function tipNode(title: string, rows: TipRow[], footer?: string): HTMLElement {
  const root = document.createElement("div");
  root.className = "ki-tip";
  const head = document.createElement("div");
  head.className = "ki-tip-title";
  head.textContent = title;
  root.appendChild(head);
  for (const row of rows) {
    const line = document.createElement("div");
    line.className = row.strong ? "ki-tip-row strong" : "ki-tip-row";
    const dot = document.createElement("span");
    dot.className = "ki-tip-dot";
    if (row.color) dot.style.background = row.color;
    const label = document.createElement("span");
    label.className = "ki-tip-label";
    label.textContent = row.label;
    const value = document.createElement("span");
    value.className = "ki-tip-value";
    value.textContent = row.value;
    line.append(dot, label, value);
    root.appendChild(line);
  }
  if (footer) {
    const foot = document.createElement("div");
    foot.className = "ki-tip-foot";
    foot.textContent = footer;
    root.appendChild(foot);
  }
  return root;
}
