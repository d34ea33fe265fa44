// DOM helpers. Every piece of data becomes a text node (textContent); no HTML strings
// are ever parsed, so kernel names such as `void at::native::f<float, 4>` stay text.

type Child = Node | string | number | null | undefined | false;
type Props = Record<string, unknown> & { className?: string; title?: string; dataset?: Record<string, string> };

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props?: Props | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null) continue;
      if (key === "dataset") {
        for (const [dk, dv] of Object.entries(value as Record<string, string>)) node.dataset[dk] = dv;
      } else if (key === "attrs") {
        for (const [ak, av] of Object.entries(value as Record<string, string>)) node.setAttribute(ak, av);
      } else if (key.startsWith("on") && typeof value === "function") {
        node.addEventListener(key.slice(2).toLowerCase(), value as EventListener);
      } else {
        (node as unknown as Record<string, unknown>)[key] = value;
      }
    }
  }
  append(node, ...children);
  return node;
}

export function append(node: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function muted(text: string): HTMLElement {
  return el("p", { className: "muted" }, text);
}

export interface Kpi {
  label: string;
  value: string;
  definition: string;
  tone?: "bad" | "warn" | "good" | "";
  sub?: string;
}

export function kpis(items: Kpi[]): HTMLElement {
  return el(
    "div",
    { className: "kpis" },
    ...items.map((k) =>
      el(
        "div",
        { className: `kpi ${k.tone ?? ""}`, title: k.definition },
        el("div", { className: "kpi-value" }, k.value),
        el("div", { className: "kpi-label" }, k.label),
        k.sub ? el("div", { className: "kpi-sub" }, k.sub) : null,
      ),
    ),
  );
}

export interface Column<T> {
  header: string;
  title?: string; // definition shown on hover of the header
  numeric?: boolean;
  className?: string;
  cell: (row: T) => Child;
  cellTitle?: (row: T) => string | undefined;
  // a header that orders the rows: its state (aria-sort) and what a click does
  sort?: { state: "none" | "ascending" | "descending"; key: string; toggle: () => void };
}

function headerCell<T>(c: Column<T>): HTMLElement {
  const className = `${c.numeric ? "n" : ""} ${c.className ?? ""} ${c.sort ? "sortable" : ""}`.replace(/\s+/g, " ").trim();
  if (!c.sort) return el("th", { className, title: c.title, scope: "col" }, c.header);
  const sort = c.sort;
  const mark = sort.state === "descending" ? " ▼" : sort.state === "ascending" ? " ▲" : "";
  const button = el("button", { type: "button", className: "sort", dataset: { sort: sort.key } }, `${c.header}${mark}`);
  button.addEventListener("click", sort.toggle);
  return el("th", { className, title: c.title ? `${c.title} Click to sort by it; again to reverse.` : undefined, scope: "col", attrs: { "aria-sort": sort.state } }, button);
}

// A table; with `limit`, extra rows hide behind a "show all" button.
export function table<T>(columns: Column<T>[], rows: T[], opts: { limit?: number; className?: string; caption?: string } = {}): HTMLElement {
  const head = el(
    "thead",
    null,
    el(
      "tr",
      null,
      ...columns.map(headerCell),
    ),
  );
  const body = el("tbody");
  rows.forEach((row, i) => {
    const tr = el(
      "tr",
      null,
      ...columns.map((c) =>
        el("td", { className: `${c.numeric ? "n" : ""} ${c.className ?? ""}`.trim(), title: c.cellTitle?.(row) }, c.cell(row)),
      ),
    );
    if (opts.limit !== undefined && i >= opts.limit) tr.hidden = true;
    body.append(tr);
  });
  const tableNode = el("table", { className: `grid ${opts.className ?? ""}`.trim() }, opts.caption ? el("caption", null, opts.caption) : null, head, body);
  const wrap = el("div", { className: "table-wrap" }, tableNode);
  if (opts.limit !== undefined && rows.length > opts.limit) {
    const more = el("button", { type: "button", className: "link" }, `Show all ${rows.length} rows`);
    more.addEventListener("click", () => {
      for (const tr of Array.from(body.rows)) tr.hidden = false;
      more.remove();
    });
    wrap.append(more);
  }
  return wrap;
}

// Two columns: label, value.
export function kvTable(rows: [string, Child, string?][]): HTMLElement {
  return el(
    "table",
    { className: "kv" },
    el(
      "tbody",
      null,
      ...rows.map(([label, value, title]) => el("tr", { title }, el("th", { scope: "row" }, label), el("td", null, value))),
    ),
  );
}

export function badge(text: string, kind: string, title?: string): HTMLSpanElement {
  return el("span", { className: `badge badge-${kind.replace(/\s+/g, "-")}`, title }, text);
}

// A name in monospace, cut with an ellipsis by CSS; the full name on hover, and a click
// (or Enter) opens it in full just below, wrapped, in a box that one click selects as a
// whole (then Ctrl+C copies it); a second click on the name closes it.
export function nameCell(name: string, full?: string): HTMLSpanElement {
  const whole = full ?? name;
  const node = el("span", { className: "name", title: `${whole}\n(click to open in full and copy)`, tabIndex: 0, dataset: { full: whole } }, name);
  node.setAttribute("aria-expanded", "false");
  let box: HTMLElement | null = null;
  const toggle = (event: Event) => {
    event.stopPropagation();
    if (box) {
      box.remove();
      box = null;
    } else {
      box = el("code", { className: "name-full", title: "Full name: one click selects it, Ctrl+C copies it" }, whole);
      box.addEventListener("click", (e) => e.stopPropagation());
      node.after(box);
    }
    node.classList.toggle("expanded", box !== null);
    node.setAttribute("aria-expanded", String(box !== null));
  };
  node.addEventListener("click", toggle);
  node.addEventListener("keydown", (event) => {
    if (event.key === "Enter") toggle(event);
  });
  return node;
}

export function notes(list: string[] | null | undefined): HTMLElement | null {
  if (!list?.length) return null;
  return el("ul", { className: "notes" }, ...list.map((n) => el("li", null, n)));
}

export function spinner(text: string): HTMLElement {
  return el("div", { className: "state loading", role: "status" }, el("span", { className: "spin", attrs: { "aria-hidden": "true" } }), el("span", null, text));
}
