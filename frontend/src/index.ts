// Entry point. TensorBoard (2.x) shows plugins whose frontend_metadata has an
// es_module_path in an iframe at /data/plugin_entry.html?name=kineto_insights, whose page
// does `import("./index.js").then((m) => void m.render())` under
// <base href="plugin/kineto_insights/">. The build wraps this bundle so that the module
// exports `render()`, which calls `render(import.meta.url)` here; every URL (routes, the
// style sheet, the chart library) is resolved against that module URL.

import { App } from "./app";
import { setApiBase } from "./api";
import { setChartsUrl } from "./charts";

function addStylesheet(href: string): void {
  if (document.querySelector("link[data-kineto-insights]")) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = href;
  link.dataset.kinetoInsights = "1";
  document.head.appendChild(link);
}

export async function render(moduleUrl: string): Promise<void> {
  const folder = new URL("./", moduleUrl).href;
  setApiBase(folder);
  setChartsUrl(new URL("echarts.js", folder).href);
  addStylesheet(new URL("style.css", folder).href);
  await new App(window).start();
}
