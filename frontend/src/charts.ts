// Mounting charts: the ECharts bundle (static/echarts.js) is loaded once, on first use,
// by a dynamic import relative to this module's URL; each chart lives in a container
// div, resizes with it, and is disposed when its view is replaced.

import type * as Vendor from "./vendor/echarts";
import { el } from "./dom";
import { fitLegend } from "./options";
import type { ChartOption } from "./options";

type VendorModule = typeof Vendor;
export type Chart = ReturnType<VendorModule["init"]>;

let vendorUrl = "";
let vendor: Promise<VendorModule> | null = null;
const live = new Set<{ chart: Chart; observer: ResizeObserver | null; node: HTMLElement }>();

export function setChartsUrl(url: string): void {
  vendorUrl = url;
}

function loadVendor(): Promise<VendorModule> {
  if (!vendor) {
    vendor = import(vendorUrl) as Promise<VendorModule>;
    vendor.catch(() => {
      vendor = null; // let a later chart try again
    });
  }
  return vendor;
}

// Starts loading the chart library early (while the summary is fetched).
export function preloadCharts(): void {
  loadVendor().catch(() => undefined);
}

export interface ChartBox {
  node: HTMLElement;
  ready: Promise<void>;
}

// A chart container; the chart is drawn once the library is there. `label` describes the
// chart for screen readers and is the chart's accessible name.
// `onInit` is given the chart instance once drawn (events, later setOption calls).
export function chart(option: ChartOption, label: string, height = 260, onInit?: (chart: Chart) => void): ChartBox {
  const node = el("div", { className: "chart", attrs: { role: "img", "aria-label": label } });
  node.style.height = `${height}px`;
  const ready = loadVendor().then(
    (lib) => {
      if (!node.isConnected) {
        // drawn before being placed: wait a frame so the container has its size
        return new Promise<void>((resolve) => requestAnimationFrame(() => resolve(draw(lib, node, option, onInit))));
      }
      draw(lib, node, option, onInit);
      return undefined;
    },
    (err: unknown) => {
      node.classList.add("chart-error");
      node.textContent = `Charts could not be loaded: ${String(err)}`;
    },
  );
  return { node, ready };
}

function draw(lib: VendorModule, node: HTMLElement, option: ChartOption, onInit?: (chart: Chart) => void): void {
  const instance = lib.init(node, null, { renderer: "canvas" });
  let width = node.clientWidth;
  instance.setOption(fitLegend(option, width));
  onInit?.(instance);
  node.dataset.chartReady = "1";
  let observer: ResizeObserver | null = null;
  if (typeof ResizeObserver !== "undefined") {
    observer = new ResizeObserver(() => {
      if (instance.isDisposed()) return;
      if (node.clientWidth !== width) {
        width = node.clientWidth;
        instance.setOption(fitLegend(option, width)); // the legend may wrap differently
      }
      instance.resize();
    });
    observer.observe(node);
  }
  live.add({ chart: instance, observer, node });
}

// Disposes every chart that is no longer in the document (its view was replaced).
export function disposeDetached(): void {
  for (const entry of Array.from(live)) {
    if (!entry.node.isConnected) {
      entry.observer?.disconnect();
      entry.chart.dispose();
      live.delete(entry);
    }
  }
}

