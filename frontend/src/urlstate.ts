// The selection (mode, run/worker/span, diff sides) kept in a URL hash, so a link can be
// shared and a reload restores the view.
//
// Where: TensorBoard shows this page in a same-origin iframe and keeps its own state in
// the *top* window's hash as "#<tab>&key=value&…" (its tf_storage format, values
// encodeURIComponent-ed). We add our keys, all prefixed "ki_", to that same hash with
// history.pushState for a change of view (a mode, a run, worker or span, a diff side, a
// step or gap opened on the timeline: Back returns to the view before) and
// history.replaceState for small state (a filter, an order, a page, a zoom); neither
// fires a hashchange for TensorBoard to react to. The tab and every other key stay as
// they are. A shared link such as
//   http://host:6006/#kineto_insights&ki_run=transformer_eager&ki_worker=worker0
// opens TensorBoard on this tab with that selection. When the parent window cannot be
// reached (another origin, a sandbox) or the page is opened on its own
// (/data/plugin_entry.html?name=kineto_insights), the page's own hash is used instead.
//
// This module is pure (strings in, strings out); app.ts does the window access.

export const PREFIX = "ki_";

export interface Side {
  run?: string;
  worker?: string; // undefined in a diff side: every worker of the run
  span?: string; // undefined in a diff side: every span of the worker
}

// A time range inside a step's window: µs after the step window's start.
export type Range = [number, number];

export type Mode = "runs" | "run" | "diff" | "history";

// The orders of the view across runs (/across_runs' `sort`) and its severity filter.
export const RUN_SORTS: readonly string[] = ["worst", "lost", "step", "util"];
export const RUN_SEVERITIES: readonly string[] = ["high", "medium", "low", "info", "none"];

export interface ViewState {
  // runs: the view across runs (the landing view when a link names no run and no mode)
  mode: Mode;
  // step: the timeline's step (N of ProfilerStep#N); window: its zoom; mark: the range
  // highlighted on it (a gap opened from the Idle panel).
  // stack: the rank stacked under the timeline (a worker; "none": none; absent: the
  // tab's choice, the straggler or the median rank).
  run: Side & { allRanks?: boolean; spanIndex?: number; step?: number; window?: Range; mark?: Range; stack?: string };
  base: Side;
  exp: Side;
  // the view across runs: its filter, the first row of its page (0-based), its order
  // (a column: lost, step, util; absent: the ranking, worst first), reversed or not, and
  // its severity filter (high, medium, low, info: at least that; none: no diagnosis)
  list: { q?: string; offset?: number; sort?: string; reverse?: boolean; severity?: string };
  // the History view's filter (series and run names)
  historyQ?: string;
}

export interface ParsedHash {
  tab: string | null;
  params: [string, string][];
}

function decode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

export function parseHash(hash: string): ParsedHash {
  const body = hash.startsWith("#") ? hash.slice(1) : hash;
  let tab: string | null = null;
  const params: [string, string][] = [];
  for (const part of body.split("&")) {
    if (!part) continue;
    const eq = part.indexOf("=");
    if (eq < 0) {
      if (tab === null) tab = decode(part);
      continue;
    }
    params.push([decode(part.slice(0, eq)), decode(part.slice(eq + 1))]);
  }
  return { tab, params };
}

export function formatHash(parsed: ParsedHash): string {
  const parts: string[] = [];
  if (parsed.tab) parts.push(parsed.tab);
  for (const [k, v] of parsed.params) parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
  return parts.join("&");
}

export function emptyState(): ViewState {
  return { mode: "run", run: {}, base: {}, exp: {}, list: {} };
}

export function stateFromParams(params: [string, string][]): ViewState {
  const get = (key: string): string | undefined => {
    const hit = params.find(([k]) => k === PREFIX + key);
    return hit ? hit[1] : undefined;
  };
  const state = emptyState();
  const mode = get("mode");
  // no mode and no run (a bare "#kineto_insights"): the landing view across runs
  if (mode === "diff" || mode === "history" || mode === "runs" || mode === "run") state.mode = mode;
  else state.mode = get("run") === undefined ? "runs" : "run";
  const offset = Number(get("offset"));
  const sort = get("sort");
  const severity = get("severity");
  state.list = {
    q: get("q") || undefined,
    offset: Number.isInteger(offset) && offset > 0 ? offset : undefined,
    sort: sort && RUN_SORTS.includes(sort) && sort !== "worst" ? sort : undefined,
    reverse: get("reverse") === "1" || undefined,
    severity: severity && RUN_SEVERITIES.includes(severity) ? severity : undefined,
  };
  state.historyQ = get("hq") || undefined;
  state.run = { run: get("run"), worker: get("worker"), span: get("span") };
  const step = Number(get("step"));
  if (get("step") !== undefined && Number.isInteger(step) && step >= 0) {
    state.run.step = step;
    const window = parseRange(get("window"));
    if (window) state.run.window = window;
    const mark = parseRange(get("mark"));
    if (mark) state.run.mark = mark;
  }
  const stack = get("stack");
  if (stack) state.run.stack = stack;
  if (get("ranks") === "all") {
    state.run.allRanks = true;
    const index = Number(get("span_index"));
    if (Number.isInteger(index)) state.run.spanIndex = index;
  }
  state.base = { run: get("base_run"), worker: get("base_worker"), span: get("base_span") };
  state.exp = { run: get("exp_run"), worker: get("exp_worker"), span: get("exp_span") };
  if (!state.base.run) state.base = {};
  if (!state.exp.run) state.exp = {};
  return state;
}

export function paramsFromState(state: ViewState): [string, string][] {
  const out: [string, string][] = [];
  const put = (key: string, value: string | number | undefined) => {
    if (value !== undefined && value !== "") out.push([PREFIX + key, String(value)]);
  };
  if (state.mode !== "run") put("mode", state.mode);
  if (state.mode === "runs") {
    put("q", state.list.q);
    if (state.list.offset) put("offset", state.list.offset);
    put("sort", state.list.sort);
    if (state.list.reverse) put("reverse", "1");
    put("severity", state.list.severity);
  }
  if (state.mode === "history") put("hq", state.historyQ);
  // Compare mode: only the two sides; the single-run keys would be stale in a link.
  if (state.mode === "run") {
    put("run", state.run.run);
    if (state.run.allRanks) {
      put("ranks", "all");
      if (state.run.spanIndex !== undefined && state.run.spanIndex !== -1) put("span_index", state.run.spanIndex);
    } else {
      put("worker", state.run.worker);
      put("span", state.run.span);
      put("stack", state.run.stack);
      if (state.run.step !== undefined) {
        put("step", state.run.step);
        if (state.run.window) put("window", formatRange(state.run.window));
        if (state.run.mark) put("mark", formatRange(state.run.mark));
      }
    }
  }
  if (state.mode === "diff") {
    for (const [name, side] of [
      ["base", state.base],
      ["exp", state.exp],
    ] as const) {
      put(`${name}_run`, side.run);
      if (side.run) {
        put(`${name}_worker`, side.worker);
        if (side.worker) put(`${name}_span`, side.span);
      }
    }
  }
  return out;
}

// "a~b" (µs, at most 3 decimals) ↔ [a, b]; null for anything else or an empty range.
export function formatRange(range: Range): string {
  const num = (v: number) => String(Math.round(v * 1000) / 1000);
  return `${num(range[0])}~${num(range[1])}`;
}

export function parseRange(text: string | undefined): Range | null {
  if (!text) return null;
  const m = /^(-?\d+(?:\.\d+)?)~(-?\d+(?:\.\d+)?)$/.exec(text);
  if (!m) return null;
  const a = Number(m[1]);
  const b = Number(m[2]);
  return Number.isFinite(a) && Number.isFinite(b) && b > a ? [a, b] : null;
}

// Whether two states name the same view (the same keys in the address bar).
export function sameState(a: ViewState, b: ViewState): boolean {
  return JSON.stringify(paramsFromState(a)) === JSON.stringify(paramsFromState(b));
}

// The hash with our keys replaced by `state`'s; the tab and foreign keys are kept.
export function mergeHash(hash: string, state: ViewState): string {
  const parsed = parseHash(hash);
  const foreign = parsed.params.filter(([k]) => !k.startsWith(PREFIX));
  return formatHash({ tab: parsed.tab, params: [...foreign, ...paramsFromState(state)] });
}

export function stateFromHash(hash: string): ViewState {
  return stateFromParams(parseHash(hash).params);
}

// What the log directory lists, as far as a link is concerned.
export interface ListedRun {
  run: string;
  workers: { worker: string; spans: { span: string }[] }[];
}

// The parts of a selection (from a link, or kept while the log directory changed) that
// the log directory does not list, in words; null when everything is there. Said to the
// user instead of silently showing another run.
export function missingFromLink(state: ViewState, runs: ListedRun[]): string | null {
  const problems: string[] = [];
  const check = (side: Side, what: string) => {
    if (!side.run) return;
    const run = runs.find((r) => r.run === side.run);
    if (!run) {
      problems.push(`${what} "${side.run}" is not (or no longer) in the log directory`);
      return;
    }
    if (!side.worker) return;
    const worker = run.workers.find((w) => w.worker === side.worker);
    if (!worker) {
      problems.push(`worker "${side.worker}" of ${what} "${side.run}" is not (or no longer) there`);
      return;
    }
    if (side.span && !worker.spans.some((x) => x.span === side.span)) {
      problems.push(`span ${side.span} of worker "${side.worker}" (${what} "${side.run}") is not (or no longer) there`);
    }
  };
  check(state.run, "the run");
  if (state.mode === "diff") {
    check(state.base, "the base run");
    check(state.exp, "the experiment run");
  }
  if (!problems.length) return null;
  const text = problems.join("; ");
  return `${text.charAt(0).toUpperCase()}${text.slice(1)}.`;
}
