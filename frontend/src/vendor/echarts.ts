// The chart library, bundled into its own file (static/echarts.js) and loaded by
// index.js with a dynamic import. Only what the page uses is registered, so the rest of
// Apache ECharts is tree-shaken away: bar and line charts (LTTB sampling on lines),
// grid, tooltip, legend, dataZoom, markLine, on the canvas renderer (no SVG, no fonts);
// the custom series draws the step timeline's rectangles.

import { BarChart, CustomChart, LineChart } from "echarts/charts";
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
  GridComponent,
  TooltipComponent,
  LegendComponent,
  DataZoomComponent,
  MarkLineComponent,
  CanvasRenderer,
]);

export { init };
