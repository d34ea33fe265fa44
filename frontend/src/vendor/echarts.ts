// The chart library, bundled into its own file (static/echarts.js) and loaded by
// index.js with a dynamic import. Only what the page uses is registered, so the rest of
// Apache ECharts is tree-shaken away: bar, line and scatter charts (LTTB sampling on
// lines; the History view's run points are one large-mode scatter path),
// grid, tooltip, legend, dataZoom, markLine, on the canvas renderer (no SVG, no fonts);
// the custom series draws the step timeline's rectangles.

import { BarChart, CustomChart, LineChart, ScatterChart } from "echarts/charts";
import {
  DataZoomComponent,
  GridComponent,
  LegendComponent,
  MarkLineComponent,
  TooltipComponent,
} from "echarts/components";
import { init, use } from "echarts/core";
import { CanvasRenderer } from "echarts/renderers";

use([
  BarChart,
  CustomChart,
  LineChart,
  ScatterChart,
  GridComponent,
  TooltipComponent,
  LegendComponent,
  DataZoomComponent,
  MarkLineComponent,
  CanvasRenderer,
]);

export { init };
