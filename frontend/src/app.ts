// The page: header with the selection, then the view (one span, all ranks of a run, or
// a diff), each section with its own loading, error and empty states.

import { Cancelled, apiUrl, getJson, getReady } from "./api";
import { disposeDetached, preloadCharts } from "./charts";
import { el, spinner } from "./dom";
import { fmtBytes, isNum } from "./format";
import { communicationPanel, ranksSection } from "./panels/communication";
import { diagnosesList } from "./panels/diagnoses";
import { diffChanges, diffDiagnoses, diffHeadline, diffMetrics, diffPerRank } from "./panels/diff";
import { healthPanel } from "./panels/health";
import { acrossPanel } from "./panels/across";
import { historyPanel } from "./panels/history";
import { idlePanel } from "./panels/idle";
import { kernelsPanel } from "./panels/kernels";
import { efficiencyPanel } from "./panels/efficiency";
import { memoryPanel } from "./panels/memory";
import { overviewPanel } from "./panels/overview";
import { type TimelineTarget, TimelineView } from "./panels/timeline";
import { whatIfSection } from "./panels/whatif";
import { type Panel, fill, panel, setError, setLoading, subhead } from "./panels/shell";
import { loadText, spanLabel, spansComparedText } from "./shape";
import { type Palette, detectDark, palette, watchTheme } from "./theme";
import type { PendingAnswer, RunEntry, RunSummaryAnswer, RunsAnswer, SpanEntry } from "./answers";
import { gapView, momentOf, momentView } from "./timeline";
import type { AcrossRunsPage, Diagnosis, DiffDocument, HistoryDocument, IdleGap, Moment, RunCollectiveKind, Summary } from "./types";
import { type Mode, type Side, type ViewState, mergeHash, missingFromLink, parseHash, sameState, stateFromHash } from "./urlstate";

const ALL = "\u0000all"; // select value for "all ranks" / "all workers" / "all spans"

type Loaded =
  | { kind: "span"; key: string; summary: Summary }
  | { kind: "ranks"; key: string; answer: RunSummaryAnswer }
  | { kind: "diff"; key: string; doc: DiffDocument }
  | { kind: "history"; key: string; doc: HistoryDocument }
  | { kind: "runs"; key: string; page: AcrossRunsPage };

const RUNS_HELP =
  "Every run of the log directory, worst first: ranked by its most severe diagnosis, then by the share of step time it explains (the order report lists diagnoses in); a column header orders by that column instead (time lost per step, step time, GPU utilization). Click a run to open it.";
// Rows per page of the view across runs.
const RUNS_PAGE = 50;

const HISTORY_HELP =
  "Every run over time, grouped into series of the same job: step time per run with its step-to-step spread, and the runs where a level changed (the diff's noise rule against the previous level) or a run was a one-off outlier.";

const DIAGNOSES_HELP = "What limits this job, most severe first; click one to see its evidence.";
const RANKS_DIAG_HELP =
  "Problems visible only when the ranks are compared, most severe first. Pick one worker above for its own diagnoses.";
const RANKS_HELP =
  "Step time and communication per rank; the same collective matched across ranks to find who arrives last.";

function spanPanels(): { diag: Panel; panels: Panel[] } {
  return {
    diag: panel("diagnoses", "Diagnoses", DIAGNOSES_HELP),
    panels: SPAN_PANELS.map(([id, title, help]) => panel(id, title, help)),
  };
}

function ranksPanels(): { diag: Panel; ranks: Panel } {
  return {
    diag: panel("diagnoses", "Diagnoses across ranks", RANKS_DIAG_HELP),
    ranks: panel("ranks", "Across ranks", RANKS_HELP),
  };
}

function diffPanels(): Panel[] {
  return [
    panel(
      "diff-summary",
      "Comparison",
      "Base vs experiment, step-normalised: the mean step time of each side, and whether the change is beyond the step-to-step noise.",
    ),
    panel("diff-diagnoses", "Diagnoses gained and lost", "Which problems the experiment fixed or introduced."),
    panel(
      "diff-metrics",
      "Metrics",
      "Each metric's mean per step on both sides, the change, and the verdict: a verdict only when the change exceeds the noise.",
    ),
    panel(
      "diff-changes",
      "Largest kernel and op changes",
      "Time per step, experiment − base: which kernels and ops got faster or slower.",
    ),
  ];
}

const SPAN_PANELS: [string, string, string][] = [
  ["overview", "Overview", "Where each step's time goes (exclusive breakdown of the step window) and how busy the GPU is."],
  ["kernels", "Kernel density", "How many kernels, how short, how launch-bound; which ones dominate; which short sequences could be fused."],
  ["idle", "Idle gaps", "When the GPU waits inside a step, and what the host was doing then."],
  [
    "timeline",
    "Timeline",
    "One step at a time: each GPU stream's kernels, the host threads that launch them, data loading, and the GPU's idle time by cause (the Idle panel's figures).",
  ],
  ["communication", "Communication", "Collective time per step, how much of it compute hides, bandwidth per kind, and skew across ranks."],
  ["memory", "Memory", "Allocated and reserved memory over time, per step, and what is still alive at the end."],
  ["efficiency", "Efficiency", "Busy but slow? Each op group's achieved FLOP/s and bytes/s against this GPU's roofline."],
  ["health", "Trace health", "What the reader found in the file: events, damage, and Kineto's own warnings."],
];

function progressText(p: PendingAnswer): string {
  if (p.pending?.length) {
    const total = isNum(p.total) ? p.total : p.pending.length;
    const first = p.pending[0];
    const where = [first.run, first.worker, first.span].filter(Boolean).join(" / ");
    return `Reading ${p.pending.length} of ${total} traces… (${where}: ${loadText(first) || first.state || "waiting"})`;
  }
  const elapsed = p.progress?.elapsed_s;
  const text = loadText({ state: p.state, progress: p.progress }) || "waiting";
  return `Reading the trace: ${text}${isNum(elapsed) ? ` (${elapsed.toFixed(0)} s)` : ""}…`;
}

export class App {
  private runs: RunEntry[] = [];
  private state: ViewState;
  private pal: Palette;
  private loaded: Loaded | null = null;
  private current: string | null = null; // key of the view being loaded or shown
  private runView: { key: string; answer: RunSummaryAnswer | null; error: string | null } | null = null;
  private spanDiag: Panel | null = null;
  private drawComm: (() => void) | null = null;
  private controller: AbortController | null = null;
  private runsTimer: number | null = null;
  private idleDevice: string | undefined;
  private timeline: TimelineView | null = null;
  // the panel to scroll to once the next span is drawn (a moment on another worker)
  private pendingPanel: string | null = null;
  private perfettoUrl: string | null = null;
  private memoryDevice: string | undefined;
  private readonly pluginName: string;

  private readonly root: HTMLElement;
  private readonly modeRuns: HTMLButtonElement;
  private readonly modeRun: HTMLButtonElement;
  private readonly modeDiff: HTMLButtonElement;
  private readonly modeHistory: HTMLButtonElement;
  private readonly controls: HTMLElement;
  private readonly loadState: HTMLElement;
  private readonly nav: HTMLElement;
  private readonly main: HTMLElement;
  private readonly banner: HTMLElement;
  // What a link (or a selection kept while the log directory changed) named that is not
  // there; shown until the user picks something else.
  private linkNotice: string | null = null;
  // the filter had the focus when it asked for a new page: give it back once drawn
  private refocusFilter = false;

  constructor(private readonly win: Window) {
    this.pluginName = new URLSearchParams(win.location.search).get("name") || "kineto_insights";
    this.state = stateFromHash(this.hashWindow().location.hash);
    this.pal = palette(detectDark(win));
    this.applyTheme();
    this.modeRuns = el("button", { type: "button", className: "mode", id: "ki-mode-runs", title: "Every run, worst first." }, "All runs");
    this.modeRuns.addEventListener("click", () => this.setMode("runs"));
    this.modeRun = el("button", { type: "button", className: "mode", id: "ki-mode-run" }, "Single run");
    this.modeDiff = el("button", { type: "button", className: "mode", id: "ki-mode-diff" }, "Compare runs");
    this.modeRun.addEventListener("click", () => this.setMode("run"));
    this.modeDiff.addEventListener("click", () => this.setMode("diff"));
    this.modeHistory = el("button", { type: "button", className: "mode", id: "ki-mode-history" }, "History");
    this.modeHistory.addEventListener("click", () => this.setMode("history"));
    this.controls = el("div", { className: "controls" });
    this.loadState = el("div", { className: "loadstate", id: "ki-loadstate", role: "status", attrs: { "aria-live": "polite" } });
    const reload = el("button", { type: "button", className: "reload", title: "Scan the log directory again and reload this view." }, "Reload");
    reload.addEventListener("click", () => void this.refreshRuns(true));
    this.nav = el("nav", { className: "jump", attrs: { "aria-label": "Panels" } });
    this.banner = el("div", { className: "banner", hidden: true });
    this.main = el("main", { id: "ki-main" });
    this.root = el(
      "div",
      { className: "ki-app" },
      el(
        "header",
        { className: "top" },
        el("h1", { title: "Why is this GPU job slow? Diagnoses first, then the evidence." }, "Kineto Insights"),
        el("div", { className: "modes", attrs: { role: "group", "aria-label": "Mode" } }, this.modeRuns, this.modeRun, this.modeDiff, this.modeHistory),
        this.controls,
        reload,
        this.loadState,
        this.nav,
      ),
      this.banner,
      this.main,
    );
    // The address bar is the state: a pasted link, Back and Forward apply it.
    const target = this.hashWindow();
    target.addEventListener("hashchange", () => this.fromAddressBar());
    target.addEventListener("popstate", () => this.fromAddressBar());
    watchTheme(win, (dark) => {
      this.pal = palette(dark);
      this.applyTheme();
      this.redraw();
    });
  }

  async start(): Promise<void> {
    this.win.document.body.replaceChildren(this.root);
    this.main.replaceChildren(spinner("Looking for traces…"));
    preloadCharts();
    await this.refreshRuns(false);
  }

  // ---------------------------------------------------------------- theme, URL

  private applyTheme(): void {
    this.win.document.documentElement.classList.toggle("ki-dark", this.pal.dark);
    this.win.document.documentElement.classList.toggle("ki-light", !this.pal.dark);
  }

  // The window whose hash keeps the selection: TensorBoard's (the parent, same origin),
  // else this page's own. See urlstate.ts.
  private hashWindow(): Window {
    try {
      const parent = this.win.parent;
      if (parent && parent !== this.win) {
        void parent.location.href; // throws for another origin
        return parent;
      }
    } catch {
      // not reachable: keep the state in this frame's own hash
    }
    return this.win;
  }

  // `push`: a new history entry (Back returns to the view before), else the current one
  // is replaced.
  private writeHash(push = false): void {
    const target = this.hashWindow();
    try {
      let hash = mergeHash(target.location.hash, this.state);
      if (target !== this.win && !parseHash(hash).tab) hash = `${this.pluginName}${hash ? `&${hash}` : ""}`;
      const url = new URL(target.location.href);
      url.hash = hash;
      if (url.href === target.location.href) return;
      if (push) target.history.pushState(target.history.state, "", url.href);
      else target.history.replaceState(target.history.state, "", url.href);
    } catch (err) {
      console.warn("kineto-insights: cannot keep the selection in the URL", err);
    }
  }

  // The address bar changed under the page (a pasted link, Back, Forward): show what it
  // names. Our own writes (replaceState/pushState) fire neither event.
  private fromAddressBar(): void {
    const next = stateFromHash(this.hashWindow().location.hash);
    if (sameState(next, this.state) || !this.runs.length) return;
    const key = this.viewKey();
    this.state = next;
    this.linkNotice = null;
    this.showBanner(null);
    this.resolve();
    this.drawControls();
    this.updateLoadState();
    if (this.viewKey() === key && this.timeline && this.main.dataset.view === key) void this.timeline.show(this.timelineTarget());
    else void this.load(false);
  }

  private timelineTarget(): TimelineTarget {
    const r = this.state.run;
    return { step: r.step, window: r.window, mark: r.mark, stack: r.stack };
  }

  // A diagnosis with a place in time opens the timeline there (on the moment's worker,
  // for a diagnosis across ranks).
  private momentOpener(): (d: Diagnosis) => (() => void) | null {
    return (d) => {
      const m = momentOf(d);
      return m ? () => this.openMoment(m) : null;
    };
  }

  // The What-if section's link to a diagnosis: its card scrolled into view, focused.
  private showDiagnosis(id: string): void {
    const card = this.win.document.querySelector<HTMLElement>(`article.diagnosis[data-diagnosis-id="${CSS.escape(id)}"]`);
    if (!card) return;
    card.scrollIntoView({ block: "center" });
    card.focus();
  }

  private openMoment(m: Moment): void {
    const target: TimelineTarget = { step: m.step, ...momentView(m) };
    const s = this.state.run;
    if (m.worker && (m.worker !== s.worker || s.allRanks)) {
      const run = this.run(s.run);
      if (!run || !run.workers.some((w) => w.worker === m.worker)) return;
      this.state.run = { run: run.run, worker: m.worker, ...target };
      this.pendingPanel = "timeline";
      this.changed(true);
      return;
    }
    Object.assign(this.state.run, target);
    this.writeHash(true);
    void this.timeline?.show(target);
    this.go("timeline");
  }

  // A "Largest gaps" row: the timeline at that gap, highlighted (a new history entry).
  private openGap(gap: IdleGap): void {
    if (typeof gap.step !== "number") return;
    const target: TimelineTarget = { step: gap.step, ...gapView(gap) };
    Object.assign(this.state.run, target);
    this.writeHash(true);
    void this.timeline?.show(target);
    this.go("timeline");
  }

  // ---------------------------------------------------------------- runs

  private async refreshRuns(reloadView: boolean): Promise<void> {
    if (this.runsTimer !== null) {
      this.win.clearTimeout(this.runsTimer);
      this.runsTimer = null;
    }
    const answer = await getJson<RunsAnswer>(apiUrl("runs"));
    if (!answer.ok || !answer.body) {
      this.showBanner(`Could not list the runs: ${answer.error ?? "unknown error"}`, "error");
      this.main.replaceChildren(el("div", { className: "state error" }, "The plugin did not answer; press Reload to try again."));
      return;
    }
    const body = answer.body;
    this.perfettoUrl = body.perfetto_url ?? null;
    const before = JSON.stringify(this.runs.map((r) => [r.run, r.workers.map((w) => [w.worker, w.spans.map((s) => s.span)])]));
    this.runs = body.runs ?? [];
    const after = JSON.stringify(this.runs.map((r) => [r.run, r.workers.map((w) => [w.worker, w.spans.map((s) => s.span)])]));
    if (body.error) this.showBanner(body.error, "error");
    else this.showBanner(this.linkNotice, "warning");
    if (!this.runs.length) {
      this.controls.replaceChildren();
      this.nav.replaceChildren();
      this.main.replaceChildren(emptyLogdir(body));
      // the page looks again by itself: traces that arrive show up without a reload
      this.scheduleRuns(body.scanning ? 1000 : EMPTY_RECHECK_MS);
      return;
    }
    const changed = before !== after || this.current === null;
    if (reloadView) this.runView = null;
    this.resolve();
    this.drawControls();
    this.updateLoadState();
    if (changed || reloadView) await this.load(reloadView);
    const busy = this.runs.some((r) => r.workers.some((w) => w.spans.some((s) => s.state === "queued" || s.state === "loading")));
    this.scheduleRuns(busy ? 2000 : 30000);
  }

  private scheduleRuns(ms: number): void {
    this.runsTimer = this.win.setTimeout(() => void this.refreshRuns(false), ms);
  }

  private showBanner(text: string | null, kind = "warning"): void {
    this.banner.hidden = !text;
    this.banner.className = `banner ${kind}`;
    this.banner.textContent = text ?? "";
  }

  private run(name: string | undefined): RunEntry | undefined {
    return this.runs.find((r) => r.run === name);
  }

  // Fill in and correct the selection against what the log directory holds.
  private resolve(): void {
    const s = this.state;
    const missing = missingFromLink(s, this.runs);
    const run = this.run(s.run.run) ?? this.runs[0];
    s.run.run = run.run;
    const worker = run.workers.find((w) => w.worker === s.run.worker);
    if (run.workers.length > 1 && (s.run.allRanks || !worker)) {
      s.run.allRanks = true;
      s.run.worker = undefined;
      s.run.span = undefined;
      if (s.run.spanIndex === undefined) s.run.spanIndex = -1;
    } else {
      s.run.allRanks = false;
      s.run.spanIndex = undefined;
      const w = worker ?? run.workers[0];
      s.run.worker = w.worker;
      const span = w.spans.find((x) => x.span === s.run.span) ?? w.spans[w.spans.length - 1];
      s.run.span = span?.span;
    }
    this.resolveSide(s.base, run.run);
    const other = this.runs[(this.runs.indexOf(this.run(s.base.run) ?? run) + 1) % this.runs.length];
    this.resolveSide(s.exp, other.run);
    if (missing) {
      // Kept until the user picks something: the link named what is not there.
      this.linkNotice = `${missing} ${s.mode === "diff" ? "Showing the runs that are there instead." : `Showing run "${s.run.run}" instead.`}`;
      this.showBanner(this.linkNotice, "warning");
    }
    this.writeHash();
  }

  private resolveSide(side: Side, fallbackRun: string): void {
    const run = this.run(side.run) ?? this.run(fallbackRun) ?? this.runs[0];
    if (side.run !== run.run) {
      side.worker = undefined;
      side.span = undefined;
    }
    side.run = run.run;
    const worker = run.workers.find((w) => w.worker === side.worker);
    if (!worker) {
      side.worker = undefined;
      side.span = undefined;
      return;
    }
    if (!worker.spans.some((x) => x.span === side.span)) side.span = undefined;
  }

  // ---------------------------------------------------------------- header

  private controlsSignature = "";

  // Redraws the header only when something in it changed (an open drop-down stays open
  // while the runs are polled).
  private drawControls(): void {
    const signature = JSON.stringify([this.state, this.runs]);
    if (signature === this.controlsSignature) return;
    this.controlsSignature = signature;
    const s = this.state;
    this.modeRun.classList.toggle("active", s.mode === "run");
    this.modeDiff.classList.toggle("active", s.mode === "diff");
    this.modeRun.setAttribute("aria-pressed", String(s.mode === "run"));
    this.modeDiff.setAttribute("aria-pressed", String(s.mode === "diff"));
    this.modeHistory.classList.toggle("active", s.mode === "history");
    this.modeHistory.setAttribute("aria-pressed", String(s.mode === "history"));
    this.modeRuns.classList.toggle("active", s.mode === "runs");
    this.modeRuns.setAttribute("aria-pressed", String(s.mode === "runs"));
    if (s.mode === "run") this.controls.replaceChildren(...this.runControls());
    else if (s.mode === "diff") this.controls.replaceChildren(...this.diffControls());
    else this.controls.replaceChildren();
  }

  private select(id: string, label: string, options: [string, string][], value: string, onChange: (v: string) => void, title?: string): HTMLElement {
    const node = el("select", { id, title });
    for (const [v, text] of options) node.append(el("option", { value: v, selected: v === value }, text));
    node.disabled = options.length < 2;
    node.addEventListener("change", () => onChange(node.value));
    return el("label", { className: "field" }, el("span", { className: "field-label" }, label), node);
  }

  private runControls(): HTMLElement[] {
    const s = this.state;
    const run = this.run(s.run.run);
    if (!run) return [];
    const runSel = this.select("ki-run", "Run", this.runs.map((r) => [r.run, r.label ?? r.run]), run.run, (v) => {
      s.run = { run: v };
      this.changed(true);
    });
    const workerOptions: [string, string][] = [];
    if (run.workers.length > 1) workerOptions.push([ALL, `All ranks (${run.workers.length} workers)`]);
    for (const w of run.workers) workerOptions.push([w.worker, w.worker]);
    const workerSel = this.select(
      "ki-worker",
      "Worker",
      workerOptions,
      s.run.allRanks ? ALL : s.run.worker ?? "",
      (v) => {
        s.run = v === ALL ? { run: run.run, allRanks: true } : { run: run.run, worker: v };
        this.changed(true);
      },
      "One worker (rank) of the run, or the view across all ranks.",
    );
    let spanSel: HTMLElement;
    if (s.run.allRanks) {
      const minSpans = Math.min(...run.workers.map((w) => w.spans.length));
      const options: [string, string][] = [["-1", "Last span of each worker"]];
      if (minSpans > 1) {
        for (let i = 0; i < minSpans; i += 1) options.push([String(i), `Span ${i + 1} of each worker`]);
      } else {
        options.push(["0", "First span of each worker"]);
      }
      spanSel = this.select("ki-span", "Span", options, String(s.run.spanIndex ?? -1), (v) => {
        s.run.spanIndex = Number(v);
        this.changed(true);
      }, "Which trace file (profiling window) of each worker.");
    } else {
      const worker = run.workers.find((w) => w.worker === s.run.worker);
      spanSel = this.select(
        "ki-span",
        "Span",
        (worker?.spans ?? []).map((x) => [x.span, spanLabel(x)]),
        s.run.span ?? "",
        (v) => {
          s.run = { run: s.run.run, worker: s.run.worker, span: v };
          this.changed(true);
        },
        "One trace file (profiling window) of this worker.",
      );
    }
    return [runSel, workerSel, spanSel];
  }

  private sideControls(name: "base" | "exp", label: string): HTMLElement {
    const side = this.state[name];
    const run = this.run(side.run) ?? this.runs[0];
    const runSel = this.select(`ki-${name}-run`, "Run", this.runs.map((r) => [r.run, r.label ?? r.run]), run.run, (v) => {
      this.state[name] = { run: v };
      this.changed(true);
    });
    const workers: [string, string][] = [[ALL, run.workers.length > 1 ? `All ${run.workers.length} workers` : "All workers"], ...run.workers.map((w): [string, string] => [w.worker, w.worker])];
    const workerSel = this.select(`ki-${name}-worker`, "Worker", workers, side.worker ?? ALL, (v) => {
      this.state[name] = { run: run.run, worker: v === ALL ? undefined : v };
      this.changed(true);
    }, "Every worker's steps pooled, or one worker.");
    const worker = run.workers.find((w) => w.worker === side.worker);
    const spans: [string, string][] = [[ALL, "All spans"], ...(worker?.spans ?? []).map((x): [string, string] => [x.span, spanLabel(x)])];
    const spanSel = this.select(`ki-${name}-span`, "Span", spans, side.span ?? ALL, (v) => {
      this.state[name] = { ...this.state[name], span: v === ALL ? undefined : v };
      this.changed(true);
    }, "Every span's steps pooled, or one span.");
    if (!worker) (spanSel.querySelector("select") as HTMLSelectElement).disabled = true;
    return el("fieldset", { className: `side side-${name}` }, el("legend", null, label), runSel, workerSel, spanSel);
  }

  private diffControls(): HTMLElement[] {
    const swap = el("button", { type: "button", className: "swap", title: "Swap base and experiment." }, "⇄");
    swap.addEventListener("click", () => {
      const b = this.state.base;
      this.state.base = this.state.exp;
      this.state.exp = b;
      this.changed(true);
    });
    return [this.sideControls("base", "Base"), swap, this.sideControls("exp", "Experiment")];
  }

  private setMode(mode: Mode): void {
    if (this.state.mode === mode) return;
    this.state.mode = mode;
    this.changed(true);
  }

  // The user changed the selection. `push`: another view (a mode, a run, a worker, a
  // span, a diff side): a new history entry, so that Back returns to the view before;
  // else (a filter, an order, a page) the current entry is replaced. The entry is
  // pushed with the state as chosen, then replaced by the state resolved against the
  // log directory (resolve()).
  private changed(push = false): void {
    if (push) this.writeHash(true);
    this.linkNotice = null; // the user chose: the link's notice is answered
    this.showBanner(null);
    this.resolve();
    this.drawControls();
    this.updateLoadState();
    void this.load(false);
  }

  // "3 of 9 traces read" and the selected span's state, in the header.
  private updateLoadState(): void {
    const spans: SpanEntry[] = this.runs.flatMap((r) => r.workers.flatMap((w) => w.spans));
    const ready = spans.filter((s) => s.state === "ready").length;
    const failed = spans.filter((s) => s.state === "error").length;
    const parts = [`${ready} of ${spans.length} traces read`];
    if (failed) parts.push(`${failed} unreadable`);
    const s = this.state;
    if (s.mode === "run" && !s.run.allRanks) {
      const span = this.run(s.run.run)?.workers.find((w) => w.worker === s.run.worker)?.spans.find((x) => x.span === s.run.span);
      if (span) {
        const text = span.state === "ready" ? `this span: read${isNum(span.size_bytes) ? `, ${fmtBytes(span.size_bytes)}` : ""}` : `this span: ${loadText(span) || span.state}`;
        parts.push(text);
      }
    }
    this.loadState.textContent = parts.join(" · ");
    this.loadState.title = "Traces are read in the background (at most two at a time) and cached on disk.";
  }

  // ---------------------------------------------------------------- views

  private viewKey(): string {
    const s = this.state;
    if (s.mode === "diff") return JSON.stringify(["diff", s.base, s.exp]);
    if (s.mode === "history") return JSON.stringify(["history"]);
    if (s.mode === "runs") return JSON.stringify(["runs", s.list.q ?? "", s.list.offset ?? 0, s.list.sort ?? "worst", !!s.list.reverse, s.list.severity ?? ""]);
    if (s.run.allRanks) return JSON.stringify(["ranks", s.run.run, s.run.spanIndex]);
    return JSON.stringify(["span", s.run.run, s.run.worker, s.run.span]);
  }

  private async load(force: boolean): Promise<void> {
    const key = this.viewKey();
    // the same view is already loading or shown (runs polling, a no-op selection)
    if (!force && this.current === key && this.main.dataset.view === key) return;
    this.current = key;
    this.controller?.abort();
    const controller = new AbortController();
    this.controller = controller;
    this.loaded = null;
    const s = this.state;
    try {
      if (s.mode === "diff") await this.loadDiff(key, controller.signal);
      else if (s.mode === "history") await this.loadHistory(key, controller.signal);
      else if (s.mode === "runs") await this.loadAcross(key, controller.signal);
      else if (s.run.allRanks) await this.loadRanks(key, controller.signal);
      else await this.loadSpan(key, controller.signal);
    } catch (err) {
      if (err instanceof Cancelled || controller.signal.aborted) return;
      throw err;
    }
  }

  private jump(ids: [string, string][]): void {
    this.nav.replaceChildren(
      ...ids.map(([id, title]) => {
        const b = el("button", { type: "button", className: "link", dataset: { target: id } }, title);
        b.addEventListener("click", () => this.go(id));
        return b;
      }),
    );
  }

  go(id: string): void {
    const target = this.win.document.getElementById(`ki-panel-${id}`);
    if (!target) return;
    target.scrollIntoView({ behavior: "smooth", block: "start" });
    target.classList.remove("flash");
    void target.offsetWidth; // restart the animation
    target.classList.add("flash");
  }

  private mount(key: string, sections: Panel[]): void {
    this.main.dataset.view = key;
    this.main.replaceChildren(...sections.map((p) => p.section));
    disposeDetached();
  }

  private async loadSpan(key: string, signal: AbortSignal): Promise<void> {
    const s = this.state;
    const { diag, panels } = spanPanels();
    this.jump([["diagnoses", "Diagnoses"], ...SPAN_PANELS.map(([id, title]): [string, string] => [id, title])]);
    this.mount(key, [diag, ...panels]);
    const params = { run: s.run.run, worker: s.run.worker, span: s.run.span };
    const answer = await getReady<Summary>("summary", params, signal, (pending) => {
      const text = progressText(pending);
      for (const p of [diag, ...panels]) setLoading(p, text);
      this.markSpan(pending);
    });
    if (!answer.ok || !answer.body) {
      const message = answer.status === 422 ? `This trace cannot be read: ${answer.error}` : answer.error ?? "unknown error";
      for (const p of [diag, ...panels]) setError(p, message);
      void this.refreshRunsQuietly();
      return;
    }
    this.loaded = { kind: "span", key, summary: answer.body };
    this.drawSpan(diag, panels, answer.body);
    void this.refreshRunsQuietly();
    const run = this.run(s.run.run);
    if (run && run.workers.length > 1) void this.loadRunViewForComm(run.run, signal);
  }

  private markSpan(pending: PendingAnswer): void {
    const s = this.state;
    const span = this.run(s.run.run)?.workers.find((w) => w.worker === s.run.worker)?.spans.find((x) => x.span === s.run.span);
    if (span && pending.state) {
      span.state = pending.state;
      span.progress = pending.progress ?? null;
      this.updateLoadState();
      const option = this.win.document.querySelector<HTMLOptionElement>(`#ki-span option[value="${CSS.escape(span.span)}"]`);
      if (option) option.textContent = spanLabel(span);
    }
  }

  private async refreshRunsQuietly(): Promise<void> {
    const answer = await getJson<RunsAnswer>(apiUrl("runs"));
    if (answer.ok && answer.body?.runs) {
      this.runs = answer.body.runs;
      this.drawControls();
      this.updateLoadState();
    }
  }

  private drawSpan(diag: Panel, panels: Panel[], summary: Summary): void {
    const byId = Object.fromEntries(panels.map((p) => [p.id, p]));
    this.spanDiag = diag;
    fill(diag, () => [
      ...whatIfSection(summary, this.pal, (id) => this.showDiagnosis(id), this.momentOpener()),
      ...diagnosesList(this.spanDiagnoses(summary), (id) => this.go(id), false, summary.steps?.count, this.momentOpener()),
    ]);
    fill(byId.overview, () => overviewPanel(summary, this.pal));
    fill(byId.kernels, () => kernelsPanel(summary, this.pal));
    const onGap = (g: IdleGap) => this.openGap(g);
    fill(byId.idle, () =>
      idlePanel(
        summary,
        this.pal,
        this.idleDevice,
        (d) => {
          this.idleDevice = d;
          fill(byId.idle, () => idlePanel(summary, this.pal, this.idleDevice, undefined, onGap));
        },
        onGap,
      ),
    );
    const s = this.state.run;
    const timeline = new TimelineView(summary, {
      pal: this.pal,
      span: { run: s.run, worker: s.worker, span: s.span },
      perfettoUrl: this.perfettoUrl,
      peers: (this.run(s.run)?.workers ?? [])
        .filter((w) => w.worker !== s.worker && w.spans.length)
        .map((w) => ({ worker: w.worker, span: w.spans[w.spans.length - 1].span })),
      preselect: () => this.defaultPeer(),
      changed: (target, push) => {
        this.state.run.step = target.step;
        this.state.run.window = target.window;
        this.state.run.mark = target.mark;
        this.state.run.stack = target.stack;
        this.writeHash(push);
      },
    });
    this.timeline = timeline;
    fill(byId.timeline, () => [timeline.node]);
    void timeline.show(this.timelineTarget());
    this.drawComm = () => fill(byId.communication, () => communicationPanel(summary, this.pal, this.acrossRanksBlock(), this.runKinds()));
    this.drawComm();
    const drawMemory = () =>
      fill(byId.memory, () =>
        memoryPanel(summary, this.pal, this.memoryDevice, (d) => {
          this.memoryDevice = d;
          drawMemory();
        }),
      );
    drawMemory();
    fill(byId.efficiency, () => efficiencyPanel(summary, this.pal));
    fill(byId.health, () => healthPanel(summary));
    if (this.pendingPanel) {
      const id = this.pendingPanel;
      this.pendingPanel = null;
      this.go(id);
    }
  }

  // The rank the timeline stacks when the address bar names none: the straggler, or,
  // on the straggler itself or without one, the other rank of median mean step time;
  // null until the view across ranks is there.
  private defaultPeer(): string | null {
    const rv = this.runView;
    const view = rv?.key === this.state.run.run ? rv?.answer?.summary : null;
    const me = this.state.run.worker;
    if (!view || !me) return null;
    const straggler = view.straggler?.worker;
    if (straggler && straggler !== me) return straggler;
    const others = (view.ranks ?? []).filter((r) => r.worker !== me).sort((a, b) => a.mean_step_us - b.mean_step_us || a.rank - b.rank);
    return others.length ? others[(others.length - 1) >> 1].worker : null;
  }

  // A span's own diagnoses, with those the view across ranks replaces (its exact
  // wait/transfer split of this rank beats the estimate from this trace alone) swapped
  // for the run-level ones about this worker, once the run view has arrived.
  private spanDiagnoses(summary: Summary): Diagnosis[] | undefined {
    const worker = this.state.run.worker;
    const rv = this.runView;
    const view = rv?.key === this.state.run.run ? rv?.answer?.summary : null;
    if (!summary.diagnoses || !worker || !view) return summary.diagnoses;
    const replaced = new Set((view.superseded_span_diagnoses ?? []).filter((x) => x.worker === worker).map((x) => x.id));
    if (!replaced.size) return summary.diagnoses;
    const fromRun = (view.diagnoses ?? []).filter((d) => replaced.has(d.id) && d.evidence?.worker === worker);
    return [...summary.diagnoses.filter((d) => !replaced.has(d.id)), ...fromRun];
  }

  // The run's bandwidth per kind from the matched transfer, once the view across ranks
  // of this (multi-worker) run has arrived; null before or without one.
  private runKinds(): RunCollectiveKind[] | null {
    const rv = this.runView;
    const view = rv?.key === this.state.run.run ? rv?.answer?.summary : null;
    return view && view.worker_count > 1 && view.kinds?.length ? view.kinds : null;
  }

  // The per-rank section inside the communication panel of a multi-worker run.
  private acrossRanksBlock(): HTMLElement | null {
    const run = this.run(this.state.run.run);
    if (!run || run.workers.length < 2) return null;
    const box = el("div", { className: "across-ranks", id: "ki-across-ranks" }, subhead("Across ranks", "The same collectives matched across the workers of this run (each worker's last span)."));
    const rv = this.runView;
    if (rv && rv.key === run.run) {
      if (rv.answer) box.append(...ranksSection(rv.answer.summary, this.pal, rv.answer.errors));
      else box.append(el("div", { className: "state error" }, rv.error ?? "unknown error"));
    } else {
      box.append(spinner("Reading the other ranks…"));
    }
    return box;
  }

  private async loadRunViewForComm(run: string, signal: AbortSignal): Promise<void> {
    if (this.runView?.key === run) return;
    try {
      const answer = await getReady<RunSummaryAnswer>("run_summary", { run }, signal, () => undefined);
      this.runView = { key: run, answer: answer.ok ? answer.body : null, error: answer.ok ? null : answer.error };
    } catch (err) {
      if (err instanceof Cancelled || signal.aborted) return;
      this.runView = { key: run, answer: null, error: String(err) };
    }
    const loaded = this.loaded;
    if (loaded?.kind === "span" && this.spanDiag) {
      const summary = loaded.summary;
      fill(this.spanDiag, () => [
        ...whatIfSection(summary, this.pal, (id) => this.showDiagnosis(id), this.momentOpener()),
        ...diagnosesList(this.spanDiagnoses(summary), (id) => this.go(id), false, summary.steps?.count, this.momentOpener()),
      ]);
    }
    if (loaded?.kind === "span") void this.timeline?.preselected();
    if (loaded?.kind === "span" && this.drawComm && this.runKinds()) {
      // every rank shows the run's matched bandwidth: redraw with it (and the box)
      this.drawComm();
      disposeDetached();
      return;
    }
    const box = this.win.document.getElementById("ki-across-ranks");
    const fresh = this.acrossRanksBlock();
    if (box && fresh) {
      box.replaceWith(fresh);
      disposeDetached();
    }
  }

  private async loadRanks(key: string, signal: AbortSignal): Promise<void> {
    const s = this.state;
    const { diag, ranks } = ranksPanels();
    this.jump([
      ["diagnoses", "Diagnoses"],
      ["ranks", "Across ranks"],
    ]);
    this.mount(key, [diag, ranks]);
    const answer = await getReady<RunSummaryAnswer>("run_summary", { run: s.run.run, span_index: s.run.spanIndex ?? -1 }, signal, (pending) => {
      const text = progressText(pending);
      setLoading(diag, text);
      setLoading(ranks, text);
    });
    if (!answer.ok || !answer.body) {
      setError(diag, answer.error ?? "unknown error");
      setError(ranks, answer.error ?? "unknown error");
      return;
    }
    this.loaded = { kind: "ranks", key, answer: answer.body };
    this.drawRanks(diag, ranks, answer.body);
    void this.refreshRunsQuietly();
  }

  // Switch from the view across ranks to one worker's own span (false: no such worker).
  private openWorker(worker: string): boolean {
    const run = this.run(this.state.run.run);
    if (!run || !run.workers.some((w) => w.worker === worker)) return false;
    this.state.run = { run: run.run, worker };
    this.changed(true);
    return true;
  }

  private drawRanks(diag: Panel, ranks: Panel, answer: RunSummaryAnswer): void {
    fill(diag, () => diagnosesList(answer.summary?.diagnoses, (id) => this.go(id), true, undefined, this.momentOpener(), (w) => this.openWorker(w)));
    fill(ranks, () => {
      if (!answer.summary) return "No view across ranks for this run.";
      const spans = answer.spans ?? [];
      return [
        ...ranksSection(answer.summary, this.pal, answer.errors),
        spans.length
          ? el(
              "p",
              { className: "note" },
              `Spans compared: ${spansComparedText(spans)}. Pick a worker above to see its own panels.`,
            )
          : null,
      ];
    });
  }

  private async loadDiff(key: string, signal: AbortSignal): Promise<void> {
    const s = this.state;
    const all = diffPanels();
    this.jump([
      ["diff-summary", "Comparison"],
      ["diff-diagnoses", "Diagnoses"],
      ["diff-metrics", "Metrics"],
      ["diff-changes", "Kernels & ops"],
    ]);
    this.mount(key, all);
    const params: Record<string, string | undefined> = {
      base_run: s.base.run,
      base_worker: s.base.worker,
      base_span: s.base.worker ? s.base.span : undefined,
      exp_run: s.exp.run,
      exp_worker: s.exp.worker,
      exp_span: s.exp.worker ? s.exp.span : undefined,
    };
    const answer = await getReady<DiffDocument>("diff", params, signal, (pending) => {
      const text = progressText(pending);
      for (const p of all) setLoading(p, text);
    });
    if (!answer.ok || !answer.body) {
      for (const p of all) setError(p, answer.error ?? "unknown error");
      return;
    }
    this.loaded = { kind: "diff", key, doc: answer.body };
    this.drawDiff(all, answer.body);
  }

  private drawDiff(panels: Panel[], doc: DiffDocument): void {
    const [summary, diagnoses, metrics, changes] = panels;
    fill(summary, () => diffHeadline(doc));
    fill(diagnoses, () => diffDiagnoses(doc));
    fill(metrics, () => {
      const table = diffMetrics(doc);
      if (typeof table === "string") return table;
      return [...table, ...(diffPerRank(doc) ?? [])];
    });
    fill(changes, () => diffChanges(doc, this.pal));
  }

  // /history until no run is loading (drawn after each answer), at most 60 answers.
  private async loadHistory(key: string, signal: AbortSignal): Promise<void> {
    const p = panel("history", "History", HISTORY_HELP);
    this.jump([["history", "History"]]);
    this.mount(key, [p]);
    setLoading(p, "Reading the history of the log directory…");
    for (let i = 0; i < 60 && !signal.aborted; i += 1) {
      const answer = await getJson<HistoryDocument>(apiUrl("history"), signal);
      if (signal.aborted || this.main.dataset.view !== key) return;
      if (!answer.ok || !answer.body) {
        setError(p, answer.error ?? "unknown error");
        return;
      }
      const doc = answer.body;
      this.loaded = { kind: "history", key, doc };
      this.drawHistory(p, doc);
      if (!Object.values(doc.skipped).includes("loading")) return;
      await new Promise((resolve) => this.win.setTimeout(resolve, 1000));
    }
  }

  // /across_runs (one page) until no run is being read (drawn after each answer).
  private async loadAcross(key: string, signal: AbortSignal): Promise<void> {
    const p = panel("runs", "All runs", RUNS_HELP);
    this.jump([["runs", "All runs"]]);
    this.mount(key, [p]);
    setLoading(p, "Ranking the runs of the log directory…");
    const { q, offset, sort, reverse, severity } = this.state.list;
    const params = { q: q || undefined, offset: offset || undefined, limit: RUNS_PAGE, sort, reverse: reverse ? 1 : undefined, severity };
    for (let i = 0; i < 60 && !signal.aborted; i += 1) {
      const answer = await getJson<AcrossRunsPage>(apiUrl("across_runs", params), signal);
      if (signal.aborted || this.main.dataset.view !== key) return;
      if (!answer.ok || !answer.body) {
        setError(p, answer.error ?? "unknown error");
        return;
      }
      this.loaded = { kind: "runs", key, page: answer.body };
      this.drawAcross(p, answer.body);
      if (!answer.body.loading) return;
      await new Promise((resolve) => this.win.setTimeout(resolve, 2000));
    }
  }

  private drawAcross(p: Panel, page: AcrossRunsPage): void {
    fill(p, () =>
      acrossPanel(page, {
        openRun: (run) => {
          this.state.mode = "run";
          this.state.run = { run };
          this.changed(true);
        },
        query: (query, offset) => {
          this.refocusFilter = this.win.document.activeElement?.id === "ki-runs-filter";
          this.state.list = {
            q: query.q || undefined,
            offset: offset || undefined,
            sort: query.sort && query.sort !== "worst" ? query.sort : undefined,
            reverse: query.reverse || undefined,
            severity: query.severity || undefined,
          };
          this.changed();
        },
      }),
    );
    if (this.refocusFilter) {
      this.refocusFilter = false;
      const input = this.win.document.getElementById("ki-runs-filter") as HTMLInputElement | null;
      input?.focus();
      input?.setSelectionRange(input.value.length, input.value.length);
    }
  }

  private drawHistory(p: Panel, doc: HistoryDocument): void {
    fill(p, () =>
      historyPanel(doc, this.pal, {
        openRun: (run) => {
          this.state.mode = "run";
          this.state.run = { run };
          this.changed(true);
        },
        diffRuns: (base, exp) => {
          this.state.mode = "diff";
          this.state.base = { run: base };
          this.state.exp = { run: exp };
          this.changed(true);
        },
        filter: (q) => {
          this.state.historyQ = q || undefined;
          this.writeHash();
          const focused = this.win.document.activeElement?.id === "ki-history-filter";
          this.drawHistory(p, doc);
          if (focused) {
            const input = this.win.document.getElementById("ki-history-filter") as HTMLInputElement | null;
            input?.focus();
            input?.setSelectionRange(input.value.length, input.value.length);
          }
        },
      }, this.state.historyQ ?? ""),
    );
  }

  // Draw the loaded data again (theme change) without asking the server.
  private redraw(): void {
    const loaded = this.loaded;
    if (!loaded || this.main.dataset.view !== loaded.key) return;
    const scroll = this.win.scrollY;
    if (loaded.kind === "span") {
      const { diag, panels } = spanPanels();
      this.mount(loaded.key, [diag, ...panels]);
      this.drawSpan(diag, panels, loaded.summary);
    } else if (loaded.kind === "ranks") {
      const { diag, ranks } = ranksPanels();
      this.mount(loaded.key, [diag, ranks]);
      this.drawRanks(diag, ranks, loaded.answer);
    } else if (loaded.kind === "runs") {
      const p = panel("runs", "All runs", RUNS_HELP);
      this.mount(loaded.key, [p]);
      this.drawAcross(p, loaded.page);
    } else if (loaded.kind === "history") {
      const p = panel("history", "History", HISTORY_HELP);
      this.mount(loaded.key, [p]);
      this.drawHistory(p, loaded.doc);
    } else {
      const all = diffPanels();
      this.mount(loaded.key, all);
      this.drawDiff(all, loaded.doc);
    }
    this.win.scrollTo(0, scroll);
  }
}

// How often an empty page asks for the runs again (the plugin learns of new files within
// about a second when it watches a local folder, else at its rescan interval).
const EMPTY_RECHECK_MS = 5000;

// The empty page: which folder(s) the plugin reads, that it is waiting, and how to get
// traces there.
export function emptyLogdir(body: RunsAnswer): HTMLElement {
  const dirs = body.logdirs ?? [];
  const where = dirs.length ? dirs.join(", ") : "the log directory";
  return el(
    "div",
    { className: "state empty", dataset: { logdirs: dirs.join("\n") } },
    el(
      "p",
      null,
      body.scanning
        ? "Still looking for traces in "
        : body.error
          ? // something was found but skipped (a symlink, a folder too deep) or could not
            // be listed: the banner above says what; "no traces yet" would contradict it
            "No trace could be read in "
          : "No PyTorch profiler traces (*.pt.trace.json[.gz]) yet in ",
      el("code", { className: "logdir" }, where),
      body.error && !body.scanning ? ": the line above says what was skipped or failed, and why." : ".",
    ),
    body.scanning
      ? null
      : el(
          "p",
          null,
          `This page updates by itself when traces arrive (${body.watched ? "the folder is watched for new files" : "the folder is scanned again periodically"}). Profile with torch.profiler.tensorboard_trace_handler(`,
          el("code", null, dirs[0] ?? "logdir"),
          "), or point TensorBoard at the folder that holds the traces.",
        ),
  );
}
