// A panel: a titled section whose body is in one of four states, kept in
// `data-state` (loading, error, empty, ready) so the states are visible and testable.

import { el, spinner } from "../dom";

export interface Panel {
  id: string;
  section: HTMLElement;
  body: HTMLElement;
}

export function panel(id: string, title: string, help: string): Panel {
  const body = el("div", { className: "panel-body" });
  const section = el(
    "section",
    { className: "panel", id: `ki-panel-${id}`, dataset: { panel: id } },
    el("header", { className: "panel-head" }, el("h2", null, title), el("p", { className: "panel-help" }, help)),
    body,
  );
  setLoading({ id, section, body }, "Waiting for the trace…");
  return { id, section, body };
}

function setState(p: Panel, state: string, ...nodes: Node[]): void {
  p.body.dataset.state = state;
  p.section.dataset.state = state;
  p.body.replaceChildren(...nodes);
}

export function setLoading(p: Panel, text: string): void {
  setState(p, "loading", spinner(text));
}

export function setError(p: Panel, message: string): void {
  setState(p, "error", el("div", { className: "state error", role: "alert" }, message));
}

export function setEmpty(p: Panel, message: string): void {
  setState(p, "empty", el("div", { className: "state empty" }, message));
}

export function setReady(p: Panel, ...nodes: (Node | null | undefined | false)[]): void {
  setState(p, "ready", ...nodes.filter((n): n is Node => Boolean(n)));
}

// Fills a panel from a builder; a builder that throws (unexpected data) leaves an error
// in that panel only, and the other panels still render.
export function fill(p: Panel, build: () => (Node | null | undefined | false)[] | string): void {
  try {
    const result = build();
    if (typeof result === "string") setEmpty(p, result);
    else setReady(p, ...result);
  } catch (err) {
    setError(p, `This panel could not be drawn: ${err instanceof Error ? err.message : String(err)}`);
    console.error("kineto-insights: panel", p.id, err);
  }
}

export function subhead(text: string, title?: string): HTMLElement {
  return el("h3", { title }, text);
}

export function row(...children: (Node | null | undefined | false)[]): HTMLElement {
  return el("div", { className: "row" }, ...children);
}

export function col(...children: (Node | null | undefined | false)[]): HTMLElement {
  return el("div", { className: "col" }, ...children);
}
