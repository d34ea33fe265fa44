// The step timeline: one step at a time (/timeline), lanes of GPU streams, launching
// host threads, data-loading threads and the GPU's idle band by cause, drawn with the
// bundled ECharts custom series; zoom and pan (wheel, drag, the slider), hover details,
// click a kernel to see (and highlight) the op that launched it.

import { apiUrl, getReady } from "../api";
import { type Chart, chart } from "../charts";
import { el, spinner } from "../dom";
import { fmtBytes, fmtCount, fmtDuration } from "../format";
import { IDLE_LABELS, LEFT_OUT_LABELS, PATH_CLASS_LABELS } from "../labels";
import type { ChartOption } from "../options";
import type { Palette } from "../theme";
import {
  KERNEL_CLASSES,
  type Range,
  type TimelineRow,
  criticalPathUs,
  gapView,
  idleTotals,
  kernelCount,
  launchShapes,
  launchingOp,
  shapesOf,
  medianStep,
  slowestStep,
  stackSteps,
  subRows,
  laneLabelWidth,
  visibleRows,
  windowQuery,
  worstGap,
} from "../timeline";
import { tipNode } from "../tooltip";
import type { Summary, TimelineStep } from "../types";

export interface TimelineTarget {
  step?: number;
  window?: Range;
  mark?: Range;
  // the rank stacked under this one: a worker, "none", or absent (the host's choice)
  stack?: string;
}

export interface TimelineHost {
  pal: Palette;
  span: { run?: string; worker?: string; span?: string };
  perfettoUrl: string | null; // Perfetto UI (the server's --kineto_insights_perfetto_url)
  // the other workers (ranks) of the run, each with its last span: one can be stacked
  // under this one, the same step aligned on the step start
  peers: { worker: string; span: string }[];
  // the rank to stack when the address bar names none (the straggler, or the median
  // rank), or null (none, or not known yet)
  preselect(): string | null;
  // the view changed by the user: keep it in the address bar (`push`: a new history
  // entry, for a step or a gap picked; a zoom replaces the current one)
  changed(target: TimelineTarget, push: boolean): void;
}


// The critical path's classes (``path:<class>``) in the colours of what they are.
function pathColor(cls: string, p: Palette): string {
  const map: Record<string, string | undefined> = {
    compute: p.breakdown.kernel,
    communication: p.breakdown.communication,
    copy: p.breakdown.memcpy,
    dependency: p.breakdown.other,
    launch: p.breakdown.runtime,
    sync: p.idle.host_sync,
    allocator: p.idle.allocator,
    runtime: p.breakdown.runtime,
    data_loading: p.idle.data_loading,
    optimizer: p.idle.optimizer_step,
    cpu_ops: p.breakdown.cpu_exec,
    untraced: p.idle.host_untraced,
    host: p.breakdown.cpu_exec,
  };
  return map[cls] ?? p.neutral;
}

function colorOf(cls: string, p: Palette): string {
  if (cls.startsWith("idle:")) return p.idle[cls.slice(5)] ?? p.neutral;
  if (cls.startsWith("path:")) return pathColor(cls.slice(5), p);
  const map: Record<string, string | undefined> = {
    compute: p.breakdown.kernel,
    communication: p.breakdown.communication,
    memcpy: p.breakdown.memcpy,
    memset: p.breakdown.memset,
    data_loading: p.idle.data_loading,
    host_sync: p.idle.host_sync,
    optimizer_step: p.idle.optimizer_step,
    launching: p.breakdown.runtime,
    cpu_ops: p.breakdown.cpu_exec,
    // the launching thread's Python frames (with_stack=True): the colour of host time
    // outside traced ops, which these frames most often explain
    python_frame: p.idle.host_untraced,
  };
  return map[cls] ?? p.neutral;
}

function classLabel(cls: string): string {
  if (cls.startsWith("idle:")) return `idle: ${IDLE_LABELS[cls.slice(5)] ?? cls.slice(5)}`;
  if (cls.startsWith("path:")) return `critical path: ${PATH_CLASS_LABELS[cls.slice(5)] ?? cls.slice(5)}`;
  return cls.replace("_", " ");
}

export class TimelineView {
  readonly node: HTMLElement;
  private doc: TimelineStep | null = null;
  private step: number | null = null;
  private window: Range | null = null;
  private mark: Range | null = null;
  private instance: Chart | null = null;
  private highlight = new Set<string>(); // "lane:index"
  private selectedKernel: string | null = null;
  private gridLeft = 170; // px left of the lanes, for their labels (laneLabelWidth)
  private readonly body: HTMLElement;
  private readonly picker: HTMLSelectElement;
  private readonly info: HTMLElement;
  private readonly launch: HTMLElement;
  private readonly download: HTMLAnchorElement;
  private downloadRanks: HTMLAnchorElement | null;
  private readonly perfettoStatus: HTMLElement;
  private own: TimelineStep | null = null; // this span's step (doc: with a stacked rank)
  private peer: { worker: string; span: string } | null = null;
  private peerSelect: HTMLSelectElement | null;
  private stack: string | undefined = undefined; // as the address bar says
  private controller: AbortController | null = null;

  constructor(
    private readonly summary: Summary,
    private readonly host: TimelineHost,
  ) {
    const windows = [
      ...(summary.steps?.steps ?? []).map((s) => ({ number: s.number, start: s.start_us, duration: s.duration_us, leftOut: "" })),
      ...(summary.steps?.left_out ?? []).map((s) => ({ number: s.number, start: s.start_us, duration: s.duration_us, leftOut: LEFT_OUT_LABELS[s.reason] ?? s.reason })),
    ].sort((a, b) => a.start - b.start || a.number - b.number);
    this.picker = el("select", { id: "ki-timeline-step", title: "The step window to show." });
    for (const s of windows)
      this.picker.append(el("option", { value: String(s.number) }, `#${s.number} (${fmtDuration(s.duration)})${s.leftOut ? ` — left out: ${s.leftOut}` : ""}`));
    this.picker.addEventListener("change", () => this.pick({ step: Number(this.picker.value) }));
    const button = (id: string, text: string, title: string, target: () => TimelineTarget | null) => {
      const b = el("button", { type: "button", className: "link", id, title }, text);
      b.addEventListener("click", () => {
        const t = target();
        if (t) this.pick(t);
      });
      return b;
    };
    const median = medianStep(summary);
    const slowest = slowestStep(summary);
    const gap = worstGap(summary);
    this.download = el(
      "a",
      { className: "link", id: "ki-timeline-download", title: "The shown window cut from the trace file (every event kept, partial overlaps on sibling tracks): open it in Perfetto UI or chrome://tracing by hand." },
      "Download window",
    );
    this.download.setAttribute("download", "");
    const perfetto = el(
      "button",
      { type: "button", className: "link", id: "ki-timeline-perfetto", title: `Open the shown window in Perfetto UI (${host.perfettoUrl ?? "not configured"}), zoomed to it.` },
      "Open in Perfetto",
    );
    perfetto.disabled = !host.perfettoUrl;
    perfetto.addEventListener("click", () => this.openPerfetto(false));
    let ranks: HTMLElement | null = null;
    this.downloadRanks = null;
    if (host.peers.length) {
      const b = el(
        "button",
        { type: "button", className: "link", id: "ki-timeline-perfetto-ranks", title: `Open the shown window of every rank of the run, merged into one trace (each rank's processes named after it), in Perfetto UI (${host.perfettoUrl ?? "not configured"}).` },
        "Open ranks",
      );
      b.disabled = !host.perfettoUrl;
      b.addEventListener("click", () => this.openPerfetto(true));
      this.downloadRanks = el(
        "a",
        { className: "link", id: "ki-timeline-download-ranks", title: "The shown window of every rank, merged into one trace: open it in Perfetto UI or chrome://tracing by hand." },
        "Download ranks",
      );
      this.downloadRanks.setAttribute("download", "");
      ranks = el("span", null, b, " ", this.downloadRanks);
    }
    this.perfettoStatus = el("span", { className: "muted", id: "ki-timeline-perfetto-status", attrs: { role: "status" } });
    let peerPicker: HTMLElement | null = null;
    this.peerSelect = null;
    if (host.peers.length) {
      const select = el("select", { id: "ki-timeline-peer", title: "Stack the same step of another rank under this one, aligned on the step start (first: the straggler, or the median rank)." });
      select.append(el("option", { value: "" }, "none"));
      for (const p of host.peers) select.append(el("option", { value: p.worker }, p.worker));
      select.addEventListener("change", () => {
        this.peer = host.peers.find((p) => p.worker === select.value) ?? null;
        this.stack = this.peer ? this.peer.worker : "none";
        this.host.changed(this.target(), true);
        void this.loadPeer();
      });
      this.peerSelect = select;
      peerPicker = el("label", { className: "field" }, el("span", { className: "field-label" }, "Stack rank"), select);
    }
    this.info = el("p", { className: "note", id: "ki-timeline-info" });
    this.launch = el("p", { className: "note", id: "ki-timeline-launch" });
    this.body = el("div", { className: "timeline-body" });
    this.node = el(
      "div",
      { className: "timeline", id: "ki-timeline" },
      el(
        "div",
        { className: "timeline-controls" },
        el("label", { className: "field" }, el("span", { className: "field-label" }, "Step"), this.picker),
        median !== null ? button("ki-timeline-median", "median step", "The step whose duration is closest to the median.", () => ({ step: median })) : null,
        slowest !== null ? button("ki-timeline-slowest", "slowest step", "The longest step window.", () => ({ step: slowest })) : null,
        gap ? button("ki-timeline-worst-gap", "worst gap", "The longest idle gap of the main GPU, highlighted.", () => ({ step: gap.step ?? undefined, ...gapView(gap) })) : null,
        peerPicker,
        perfetto,
        this.download,
        ranks,
        this.perfettoStatus,
      ),
      this.info,
      this.body,
      this.launch,
    );
  }

  // The default view: the median step.
  defaultStep(): number | null {
    return medianStep(this.summary);
  }

  private pick(target: TimelineTarget): void {
    const t = { ...target, stack: target.stack ?? this.stack };
    this.host.changed(t, true);
    void this.show(t);
  }

  // What is shown, as the address bar keeps it.
  private target(): TimelineTarget {
    return { step: this.step ?? undefined, window: this.window ?? undefined, mark: this.mark ?? undefined, stack: this.stack };
  }

  // Show a step (fetched when it is not the one shown), zoomed to `window`, with `mark`
  // highlighted.
  async show(target: TimelineTarget): Promise<void> {
    const step = target.step ?? this.defaultStep();
    if (step === null) {
      this.body.replaceChildren(el("div", { className: "state empty" }, "No steps to show."));
      return;
    }
    this.window = target.window ?? null;
    this.mark = target.mark ?? null;
    this.picker.value = String(step);
    const peerChanged = this.choosePeer(target.stack);
    if (this.doc && this.step === step) {
      if (peerChanged) await this.loadPeer();
      else this.applyView();
      return;
    }
    this.step = step;
    this.doc = null;
    this.controller?.abort();
    const controller = new AbortController();
    this.controller = controller;
    this.body.replaceChildren(spinner(`Loading step #${step}…`));
    let answer;
    try {
      answer = await getReady<TimelineStep>("timeline", { ...this.host.span, step }, controller.signal, () => undefined);
    } catch {
      return; // cancelled: another step was asked for
    }
    if (controller.signal.aborted || this.step !== step) return;
    if (!answer.ok || !answer.body) {
      this.body.replaceChildren(el("div", { className: "state error", role: "alert" }, answer.error ?? "unknown error"));
      return;
    }
    this.own = answer.body;
    this.doc = answer.body;
    if (this.peer) await this.loadPeer();
    else this.draw();
  }

  // The rank to stack for `stack` (the address bar's: a worker, "none", or absent: the
  // host's preselection); true when it is another than the one shown.
  private choosePeer(stack: string | undefined): boolean {
    this.stack = stack;
    if (!this.host.peers.length) return false;
    const want = stack === "none" ? null : stack ?? this.host.preselect();
    const peer = want ? this.host.peers.find((p) => p.worker === want) ?? null : null;
    if (this.peerSelect) this.peerSelect.value = peer ? peer.worker : "";
    const changed = (peer?.worker ?? null) !== (this.peer?.worker ?? null);
    this.peer = peer;
    return changed;
  }

  // The preselected rank may be known only now (the view across ranks arrived): stack
  // it when the address bar chose none.
  async preselected(): Promise<void> {
    if (this.stack !== undefined) return;
    if (this.choosePeer(undefined)) await this.loadPeer();
  }

  // Stack the chosen rank's same step under this one (or go back to this span alone).
  private async loadPeer(): Promise<void> {
    const own = this.own;
    if (!own) return;
    const peer = this.peer;
    if (!peer) {
      this.doc = own;
      this.draw();
      return;
    }
    const span = { run: this.host.span.run, worker: peer.worker, span: peer.span };
    const controller = new AbortController();
    let answer;
    try {
      answer = await getReady<TimelineStep>("timeline", { ...span, step: own.step }, controller.signal, () => undefined);
    } catch {
      return;
    }
    if (this.own !== own || this.peer !== peer) return; // another step or rank meanwhile
    if (!answer.ok || !answer.body) {
      this.doc = own;
      this.draw();
      this.launch.replaceChildren(`${peer.worker} has no step #${own.step} to stack: ${answer.error ?? "unknown error"}`);
      return;
    }
    this.doc = stackSteps(own, this.host.span.worker ?? "this rank", answer.body, peer.worker);
    this.draw();
  }

  private range(): Range {
    const doc = this.doc as TimelineStep;
    return this.window ?? [0, doc.duration_us];
  }

  private draw(): void {
    const doc = this.doc as TimelineStep;
    const own = this.own ?? doc;
    const kernels = kernelCount(own);
    const idle = idleTotals(own);
    const idleText = [...idle.entries()].map(([d, v]) => `GPU ${d} idle ${fmtDuration(v.total)}`).join(", ");
    const pathUs = criticalPathUs(own);
    this.info.replaceChildren(
      `Step #${doc.step}: ${fmtDuration(doc.duration_us)}, ${fmtCount(kernels)} kernels`,
      doc.left_out ? ` (left out of every step figure: ${LEFT_OUT_LABELS[doc.left_out] ?? doc.left_out})` : "",
      idleText ? `, ${idleText}` : "",
      doc.block_us ? ` (runs of events under ${fmtDuration(doc.block_us)} stored as blocks)` : "",
      pathUs !== null ? `; the critical-path lane marks the ${fmtDuration(pathUs)} of work that set the step's end` : "",
      ". Drag or use the wheel to zoom, the slider to pan; click a kernel for the op that launched it.",
    );
    const mainDevice = this.summary.idle?.main_device ?? [...idle.keys()][0];
    this.info.dataset.kernels = String(kernels);
    this.info.dataset.idleUs = String(idle.get(mainDevice ?? -1)?.total ?? 0);
    this.info.dataset.step = String(doc.step);
    this.info.dataset.lanes = String(doc.lanes.length);
    this.info.dataset.pathUs = pathUs === null ? "" : String(pathUs);
    this.info.dataset.stacked = this.doc !== this.own && this.peer ? this.peer.worker : "";
    const labels = doc.lanes.map((l) => l.label);
    this.gridLeft = laneLabelWidth(labels);
    const height = 70 + doc.lanes.reduce((h, l) => h + (subRows(l) > 1 ? 48 : 26), 0);
    const [lo, hi] = this.range();
    const box = chart(this.option(labels, lo, hi), `Timeline of step ${doc.step}: GPU streams, host threads and idle time`, Math.max(180, height), (instance) => {
      this.instance = instance;
      instance.on("datazoom", () => this.zoomed());
      instance.on("click", (params: unknown) => this.clicked(params as { seriesId?: string; data?: TimelineRow }));
      this.setViewData();
    });
    box.node.id = "ki-timeline-chart";
    box.node.dataset.labelPx = String(this.gridLeft - 12); // the lane labels' room (tests read it)
    this.body.replaceChildren(box.node);
    this.launch.replaceChildren();
    this.highlight.clear();
    this.selectedKernel = null;
  }

  private usPerPx(lo: number, hi: number): number {
    const width = Math.max(100, (this.body.clientWidth || 800) - this.gridLeft - 30);
    return (hi - lo) / width;
  }

  private option(labels: string[], lo: number, hi: number): ChartOption {
    const doc = this.doc as TimelineStep;
    const p = this.host.pal;
    const subs = doc.lanes.map(subRows);
    const min = Math.min(0, ...doc.lanes.map((l) => (l.offset_us.length ? Math.min(...l.offset_us) : 0)));
    return {
      animation: false,
      backgroundColor: "transparent",
      textStyle: { color: p.text },
      grid: { left: this.gridLeft, right: 24, top: 8, bottom: 64 },
      xAxis: {
        type: "value",
        min,
        max: doc.duration_us,
        name: "time after the step window's start",
        nameLocation: "middle",
        nameGap: 24,
        axisLabel: { color: p.muted, formatter: (v: number) => fmtDuration(v) },
        splitLine: { lineStyle: { color: p.split } },
      },
      yAxis: { type: "category", data: labels, inverse: true, axisLabel: { color: p.text, width: this.gridLeft - 12, overflow: "truncate" } },
      dataZoom: [
        { type: "inside", xAxisIndex: 0, filterMode: "none", startValue: lo, endValue: hi },
        { type: "slider", xAxisIndex: 0, filterMode: "none", startValue: lo, endValue: hi, height: 18, bottom: 8, labelFormatter: (v: number) => fmtDuration(v) },
      ],
      tooltip: { trigger: "item", confine: true, formatter: (params: unknown) => this.tip(params as { seriesId?: string; data?: TimelineRow }) },
      series: [
        {
          id: "mark",
          type: "custom",
          silent: true,
          data: [],
          renderItem: (params, api) => {
            const a = api.coord([api.value(0) as number, 0]);
            const b = api.coord([api.value(1) as number, 0]);
            const cs = params.coordSys as unknown as { x: number; y: number; width: number; height: number };
            const x0 = Math.max(cs.x, Math.min(a[0], b[0]));
            const x1 = Math.min(cs.x + cs.width, Math.max(a[0], b[0]));
            if (x1 <= x0) return null;
            return { type: "rect", shape: { x: x0, y: cs.y, width: Math.max(2, x1 - x0), height: cs.height }, style: { fill: p.accent, opacity: 0.15, stroke: p.accent, lineWidth: 1 } };
          },
        },
        {
          id: "events",
          type: "custom",
          data: [],
          encode: { x: [1, 2], y: 0 },
          progressive: 20000,
          renderItem: (params, api) => {
            const lane = api.value(0) as number;
            const a = api.coord([api.value(1) as number, lane]);
            const b = api.coord([api.value(2) as number, lane]);
            const band = (api.size?.([0, 1]) as number[])[1];
            const n = subs[lane] ?? 1;
            const h = (band * 0.8) / n;
            const y = a[1] - band * 0.4 + (api.value(3) as number) * h;
            const cs = params.coordSys as unknown as { x: number; y: number; width: number; height: number };
            const x0 = Math.max(cs.x, a[0]);
            const x1 = Math.min(cs.x + cs.width, Math.max(b[0], a[0] + 1));
            if (x1 <= x0) return null;
            const key = `${lane}:${api.value(5) as number}`;
            const lit = this.highlight.has(key);
            return {
              type: "rect",
              shape: { x: x0, y, width: Math.max(1, x1 - x0), height: Math.max(1, h - 1) },
              style: {
                fill: colorOf(doc.classes[api.value(4) as number] ?? "", p),
                stroke: lit ? p.text : undefined,
                lineWidth: lit ? 2 : 0,
                opacity: this.highlight.size && !lit ? 0.45 : 1,
              },
            };
          },
        },
      ],
    };
  }

  // Data for the range shown (level of detail), and the address bar's view.
  private setViewData(): void {
    if (!this.instance || !this.doc) return;
    const [lo, hi] = this.range();
    const rows = visibleRows(this.doc, lo, hi, this.usPerPx(lo, hi));
    this.instance.setOption({ series: [{ id: "mark", data: this.mark ? [this.mark] : [] }, { id: "events", data: rows }] });
    this.download.href = apiUrl("window", { ...this.host.span, step: this.doc.step, ...this.windowParams(), download: 1 });
    if (this.downloadRanks) this.downloadRanks.href = apiUrl("window_ranks", { run: this.host.span.run, step: this.doc.step, ...this.windowParams(), download: 1 });
    const chartNode = this.body.querySelector<HTMLElement>("#ki-timeline-chart");
    if (chartNode) {
      chartNode.dataset.rows = String(rows.length);
      chartNode.dataset.window = `${lo}~${hi}`;
      chartNode.dataset.mark = this.mark ? `${this.mark[0]}~${this.mark[1]}` : "";
    }
  }

  // The window sent to Perfetto: the zoomed range, else the server's default (the step
  // with 10 % of its length on each side).
  private windowParams(): { start_us?: string; end_us?: string } {
    return windowQuery(this.window);
  }

  // Perfetto UI's documented postMessage API: open it on the click (a popup needs the
  // user's gesture), PING until it answers PONG, then post the window's bytes with a
  // title; the zoom rides in its address (visStart/visEnd, ns on the trace's clock).
  // `ranks`: every rank's window of the step, merged (/window_ranks; zoomed to this
  // rank's window).
  private openPerfetto(ranks: boolean): void {
    const doc = this.doc;
    const base = this.host.perfettoUrl;
    if (!doc || !base) return;
    const margin = Math.trunc(Math.round(doc.duration_us * 1000) * 0.1);
    const [startNs, endNs] = this.window
      ? [doc.trace_start_ns + Math.round(this.window[0] * 1000), doc.trace_start_ns + Math.round(this.window[1] * 1000)]
      : [doc.trace_start_ns - margin, doc.trace_start_ns + Math.round(doc.duration_us * 1000) + margin];
    let target: URL;
    try {
      target = new URL(base, window.location.href);
    } catch {
      this.perfettoStatus.textContent = `Not a valid Perfetto address: ${base}`;
      return;
    }
    target.searchParams.set("visStart", String(startNs));
    target.searchParams.set("visEnd", String(endNs));
    const handle = window.open(target.href, "_blank");
    if (!handle) {
      this.perfettoStatus.textContent = "The browser blocked the new tab: allow pop-ups for this page, or use Download window.";
      return;
    }
    const span = this.host.span;
    const title = ranks ? `${span.run ?? ""} every rank, step #${doc.step}` : `${span.run ?? ""}/${span.worker ?? ""} step #${doc.step}`;
    const fileName = ranks ? `${span.run ?? "run"}.step${doc.step}.ranks.json` : `${span.worker ?? "trace"}.${span.span ?? ""}.step${doc.step}.window.json`;
    const source = ranks
      ? apiUrl("window_ranks", { run: span.run, step: doc.step, ...this.windowParams(), wait: 60 })
      : apiUrl("window", { ...span, step: doc.step, ...this.windowParams() });
    const bytes = fetch(source, { credentials: "same-origin" }).then((r) =>
      r.status === 200 ? r.arrayBuffer() : Promise.reject(new Error(r.status === 202 ? "the other ranks are still being read; try again shortly" : `HTTP ${r.status}`)),
    );
    this.perfettoStatus.textContent = "Opening Perfetto UI…";
    const origin = target.origin;
    let answered = false;
    const ping = window.setInterval(() => handle.postMessage("PING", origin), 50);
    const stop = () => {
      window.clearInterval(ping);
      window.removeEventListener("message", onMessage);
    };
    const onMessage = (event: MessageEvent) => {
      if (event.source !== handle || event.data !== "PONG") return;
      answered = true;
      stop();
      bytes.then(
        (buffer) => {
          // read before the transfer: a transferred buffer is detached (byteLength 0)
          const size = buffer.byteLength;
          handle.postMessage({ perfetto: { buffer, title, fileName, url: window.location.href } }, origin, [buffer]);
          this.perfettoStatus.textContent = `Sent to Perfetto UI (${fmtBytes(size)}).`;
          this.perfettoStatus.dataset.bytes = String(size);
        },
        (err: unknown) => {
          this.perfettoStatus.textContent = `The window could not be cut: ${String(err)}`;
        },
      );
    };
    window.addEventListener("message", onMessage);
    window.setTimeout(() => {
      if (answered) return;
      stop();
      this.perfettoStatus.textContent = `Perfetto UI did not answer at ${origin}; use Download window.`;
    }, 30000);
  }

  private applyView(): void {
    if (!this.instance || !this.doc) return;
    const [lo, hi] = this.range();
    this.instance.dispatchAction({ type: "dataZoom", startValue: lo, endValue: hi });
    this.setViewData();
  }

  private zoomed(): void {
    if (!this.instance || !this.doc) return;
    const zoom = (this.instance.getOption() as { dataZoom?: { startValue?: number; endValue?: number }[] }).dataZoom?.[0];
    if (!zoom || typeof zoom.startValue !== "number" || typeof zoom.endValue !== "number") return;
    const window: Range = [zoom.startValue, zoom.endValue];
    const [lo, hi] = this.range();
    if (Math.abs(window[0] - lo) < 1e-6 && Math.abs(window[1] - hi) < 1e-6) return;
    this.window = window;
    this.setViewData();
    this.host.changed(this.target(), false);
  }

  private event(row: TimelineRow): { lane: TimelineStep["lanes"][number]; name: string; cls: string } {
    const doc = this.doc as TimelineStep;
    const lane = doc.lanes[row[0]];
    const index = row[5];
    const name = index >= 0 ? doc.names[lane.name[index]] ?? "" : `${fmtCount(row[6])} events (zoom in to see each)`;
    return { lane, name, cls: doc.classes[row[4]] ?? "" };
  }

  private tip(params: { seriesId?: string; data?: TimelineRow }): HTMLElement | string {
    const row = params.data;
    if (params.seriesId !== "events" || !row || !this.doc) return "";
    const { lane, name, cls } = this.event(row);
    const rows = [
      { label: "class", value: classLabel(cls), color: colorOf(cls, this.host.pal) },
      { label: "start", value: `${fmtDuration(row[1])} after the step start` },
      { label: "duration", value: fmtDuration(row[2] - row[1]) },
      { label: "lane", value: lane.label },
    ];
    if (row[5] >= 0 && lane.kind === "gpu_stream") {
      const launch = launchingOp(this.doc, lane.correlation[row[5]]);
      rows.push({ label: "launched by", value: launch ? [...launch.ops, launch.call].join(" › ") : "outside this step", color: undefined });
      const shapes = launch ? launchShapes(this.doc, launch) : null;
      if (shapes) rows.push({ label: "input shapes", value: shapes, color: undefined });
    } else if (row[5] >= 0) {
      const shapes = shapesOf(this.doc, lane, row[5]);
      if (shapes) rows.push({ label: "input shapes", value: shapes, color: undefined });
    }
    if (row[6] > 1) rows.push({ label: "events", value: fmtCount(row[6]) });
    return tipNode(name, rows);
  }

  private clicked(params: { seriesId?: string; data?: TimelineRow }): void {
    const row = params.data;
    if (params.seriesId !== "events" || !row || !this.doc || row[5] < 0) return;
    const { lane, name, cls } = this.event(row);
    const key = `${row[0]}:${row[5]}`;
    this.highlight.clear();
    if (lane.kind !== "gpu_stream" || !KERNEL_CLASSES.has(cls) || this.selectedKernel === key) {
      this.selectedKernel = null; // a second click on the kernel: back
      this.launch.replaceChildren();
      this.setViewData();
      return;
    }
    this.selectedKernel = key;
    this.highlight.add(key);
    const launch = launchingOp(this.doc, lane.correlation[row[5]]);
    if (launch) {
      this.highlight.add(`${launch.lane}:${launch.index}`);
      for (const j of launch.opIndices) this.highlight.add(`${launch.lane}:${j}`);
      this.launch.replaceChildren(`${name}: launched by ${launch.call}`, launch.ops.length ? ` in ${launch.ops.join(" › ")}` : "", ` (${this.doc.lanes[launch.lane].label}). Click it again to clear.`);
    } else {
      this.launch.replaceChildren(`${name}: its launch is not in this step's window (launched earlier, or no correlation id).`);
    }
    this.launch.dataset.kernel = name;
    this.setViewData();
  }
}
