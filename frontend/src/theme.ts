// Light and dark colours. The page follows TensorBoard: its `dark-mode` class on the
// parent document's body when the parent can be reached (TensorBoard sets it from its
// own theme setting, which defaults to the browser's), else prefers-color-scheme.

export interface Palette {
  dark: boolean;
  text: string;
  muted: string;
  axis: string;
  split: string;
  background: string;
  tooltipBackground: string;
  tooltipBorder: string;
  breakdown: Record<string, string>;
  idle: Record<string, string>;
  good: string;
  bad: string;
  neutral: string;
  warn: string;
  accent: string;
  accent2: string;
  short: string;
  stepLine: string;
}

const LIGHT: Palette = {
  dark: false,
  text: "#202124",
  muted: "#5f6368",
  axis: "#80868b",
  split: "#e3e5e8",
  background: "#ffffff",
  tooltipBackground: "#ffffff",
  tooltipBorder: "#c4c7cc",
  breakdown: {
    kernel: "#2f6fbd",
    memcpy: "#1f9e8f",
    memset: "#7cc8bd",
    communication: "#8250c4",
    runtime: "#e8871e",
    data_loading: "#d63c3c",
    cpu_exec: "#d4a72c",
    other: "#a7adb5",
  },
  idle: {
    compiling: "#5f4b8b",
    data_loading: "#d63c3c",
    host_sync: "#b8457a",
    allocator: "#2a9d8f",
    optimizer_step: "#8250c4",
    launching: "#e8871e",
    cpu_ops: "#d4a72c",
    graph_replay: "#4f86a8",
    host_untraced: "#6b7c93",
    nothing_recorded: "#a7adb5",
  },
  good: "#1e8e3e",
  bad: "#d93025",
  neutral: "#80868b",
  warn: "#e37400",
  accent: "#2f6fbd",
  accent2: "#e8871e",
  short: "#e8871e",
  stepLine: "#9aa0a6",
};

const DARK: Palette = {
  dark: true,
  text: "#e8eaed",
  muted: "#a9afb6",
  axis: "#9aa0a6",
  split: "#3c4043",
  background: "#202124",
  tooltipBackground: "#2d2f31",
  tooltipBorder: "#5f6368",
  breakdown: {
    kernel: "#6aa5f0",
    memcpy: "#3cc4b4",
    memset: "#9bdcd3",
    communication: "#b28cf0",
    runtime: "#f5a54a",
    data_loading: "#f07070",
    cpu_exec: "#e9c85e",
    other: "#7b818a",
  },
  idle: {
    compiling: "#a592d6",
    data_loading: "#f07070",
    host_sync: "#e27aab",
    allocator: "#5cc8b8",
    optimizer_step: "#b28cf0",
    launching: "#f5a54a",
    cpu_ops: "#e9c85e",
    graph_replay: "#7fb2d2",
    host_untraced: "#93a4bc",
    nothing_recorded: "#7b818a",
  },
  good: "#5bb974",
  bad: "#f28b82",
  neutral: "#9aa0a6",
  warn: "#fcad70",
  accent: "#6aa5f0",
  accent2: "#f5a54a",
  short: "#f5a54a",
  stepLine: "#80868b",
};

export function palette(dark: boolean): Palette {
  return dark ? DARK : LIGHT;
}

// The parent's body (TensorBoard), or null when it cannot be reached.
function parentBody(win: Window): HTMLElement | null {
  try {
    if (win.parent && win.parent !== win) return win.parent.document.body;
  } catch {
    // another origin: fall back to the media query
  }
  return null;
}

export function detectDark(win: Window): boolean {
  const body = parentBody(win);
  if (body) return body.classList.contains("dark-mode");
  return Boolean(win.matchMedia?.("(prefers-color-scheme: dark)").matches);
}

// Calls `onChange(dark)` whenever TensorBoard's theme or the system theme changes.
export function watchTheme(win: Window, onChange: (dark: boolean) => void): void {
  let last = detectDark(win);
  const check = () => {
    const now = detectDark(win);
    if (now !== last) {
      last = now;
      onChange(now);
    }
  };
  const body = parentBody(win);
  if (body && typeof MutationObserver !== "undefined") {
    try {
      new MutationObserver(check).observe(body, { attributes: true, attributeFilter: ["class"] });
    } catch {
      // observing another realm's node can fail in odd embeddings; the media query remains
    }
  }
  win.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", check);
}
