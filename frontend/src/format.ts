// Number formatting: every number the page shows goes through here, with its unit.
// Pure functions (no DOM), unit-tested with node --test.

import type { Num } from "./answers";

export const NA = "n/a";

export function isNum(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

// Significant digits without trailing noise: 3 significant digits, but never
// scientific notation and at most 2 decimals for values ≥ 1.
function sig(value: number, digits = 3): string {
  const abs = Math.abs(value);
  if (abs === 0) return "0";
  if (abs >= 10 ** digits) return Math.round(value).toLocaleString("en-US");
  const decimals = Math.max(0, digits - 1 - Math.floor(Math.log10(abs)));
  const text = value.toFixed(Math.min(decimals, abs >= 1 ? 2 : 3));
  // 0.50 → 0.5, 2.00 → 2 (keep integers as they are)
  return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
}

export interface Scaled {
  value: string;
  unit: string;
}

// Microseconds → the readable unit (ns, µs, ms, s).
export function scaleDuration(us: number): Scaled {
  const abs = Math.abs(us);
  if (abs === 0) return { value: "0", unit: "µs" };
  if (abs < 1) return { value: sig(us * 1000), unit: "ns" };
  if (abs < 1000) return { value: sig(us), unit: "µs" };
  if (abs < 1e6) return { value: sig(us / 1000), unit: "ms" };
  return { value: sig(us / 1e6), unit: "s" };
}

export function fmtDuration(us: Num): string {
  if (!isNum(us)) return NA;
  const s = scaleDuration(us);
  return `${s.value} ${s.unit}`;
}

// Milliseconds with fixed decimals (step times in tables and axes).
export function fmtMs(us: Num, digits = 2): string {
  return isNum(us) ? `${(us / 1000).toFixed(digits)} ms` : NA;
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

export function scaleBytes(bytes: number): Scaled {
  let value = Math.abs(bytes);
  let unit = 0;
  while (value >= 1024 && unit < BYTE_UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const signed = bytes < 0 ? -value : value;
  return { value: unit === 0 ? String(Math.round(signed)) : sig(signed), unit: BYTE_UNITS[unit] };
}

export function fmtBytes(bytes: Num): string {
  if (!isNum(bytes)) return NA;
  const s = scaleBytes(bytes);
  return `${s.value} ${s.unit}`;
}

// A fixed unit for an axis whose largest value is `max` bytes: {unit, divisor}.
export function byteAxisUnit(max: number): { unit: string; divisor: number } {
  let unit = 0;
  let divisor = 1;
  while (isNum(max) && Math.abs(max) / divisor >= 1024 && unit < BYTE_UNITS.length - 1) {
    divisor *= 1024;
    unit += 1;
  }
  return { unit: BYTE_UNITS[unit], divisor };
}

// A fixed unit for a duration axis whose largest value is `maxUs` µs.
export function durationAxisUnit(maxUs: number): { unit: string; divisor: number } {
  const abs = Math.abs(maxUs);
  if (!isNum(abs) || abs < 1000) return { unit: "µs", divisor: 1 };
  if (abs < 1e6 * 10) return { unit: "ms", divisor: 1000 };
  return { unit: "s", divisor: 1e6 };
}

// 0..1 → "12.3 %". Tiny non-zero shares show as "<0.1 %" so they do not read as zero.
export function fmtPercent(fraction: Num, digits = 1): string {
  if (!isNum(fraction)) return NA;
  const pct = fraction * 100;
  const min = 10 ** -digits;
  if (pct !== 0 && Math.abs(pct) < min) return `${pct < 0 ? ">-" : "<"}${min} %`;
  return `${pct.toFixed(digits)} %`;
}

export function fmtCount(value: Num, digits = 1): string {
  if (!isNum(value)) return NA;
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  return value.toLocaleString("en-US", { maximumFractionDigits: digits });
}

// Bandwidth in GB/s (1e9 bytes per second, as nccl-tests).
export function fmtBandwidth(gbps: Num): string {
  return isNum(gbps) ? `${sig(gbps)} GB/s` : NA;
}

// A signed change, e.g. "+1.2 ms" / "−350 µs" (true minus sign).
export function fmtSignedDuration(us: Num): string {
  if (!isNum(us)) return NA;
  if (us === 0) return "±0 µs";
  return `${us > 0 ? "+" : "\u2212"}${fmtDuration(Math.abs(us))}`;
}

export function fmtSignedPercent(fraction: Num, digits = 1): string {
  if (!isNum(fraction)) return NA;
  const pct = Math.abs(fraction) * 100;
  // small changes get more decimals rather than a "<0.1 %" that hides their sign
  const places = pct > 0 && pct < 10 ** -digits ? digits + 1 : digits;
  if (Number(pct.toFixed(places)) === 0) return "±0 %";
  return `${fraction > 0 ? "+" : "\u2212"}${pct.toFixed(places)} %`;
}

// base / exp of step time: "2.71× faster" / "1.25× slower".
export function fmtSpeedup(speedup: Num): string {
  if (!isNum(speedup) || speedup <= 0) return NA;
  if (Math.abs(speedup - 1) < 0.005) return "same speed (1.00×)";
  return speedup > 1
    ? `${speedup.toFixed(2)}× faster`
    : `${(1 / speedup).toFixed(2)}× slower`;
}

// A value in a diff metric's unit ("µs", "fraction", "count", "bytes", "bytes/step", "GB/s").
export function fmtInUnit(value: Num, unit: string): string {
  switch (unit) {
    case "µs":
    case "us":
      return fmtDuration(value);
    case "fraction":
      return fmtPercent(value);
    case "bytes":
      return fmtBytes(value);
    case "bytes/step":
      return isNum(value) ? `${fmtBytes(value)}/step` : NA;
    case "GB/s":
      return fmtBandwidth(value);
    case "count":
      return fmtCount(value);
    default:
      return isNum(value) ? `${sig(value)} ${unit}`.trim() : NA;
  }
}

// A signed delta in a metric's unit; fractions change in percentage points.
export function fmtDeltaInUnit(delta: Num, unit: string): string {
  if (!isNum(delta)) return NA;
  const sign = delta > 0 ? "+" : delta < 0 ? "\u2212" : "±";
  if (unit === "fraction") return `${sign}${(Math.abs(delta) * 100).toFixed(1)} pp`;
  return `${sign}${fmtInUnit(Math.abs(delta), unit)}`;
}

// Histogram bin label: "<1 µs", "1–2 µs", "≥10 ms".
export function binLabel(lo: number, hi: number | null | undefined): string {
  if (!isNum(hi)) return `≥${fmtDuration(lo)}`;
  if (lo === 0) return `<${fmtDuration(hi)}`;
  const a = scaleDuration(lo);
  const b = scaleDuration(hi);
  return a.unit === b.unit ? `${a.value}–${b.value} ${b.unit}` : `${a.value} ${a.unit}–${b.value} ${b.unit}`;
}

// "data_loading" → "data loading"; "cpu_ops" → "CPU ops".
const WORDS: Record<string, string> = {
  cpu: "CPU",
  gpu: "GPU",
  ops: "ops",
  exec: "exec",
  memcpy: "memcpy",
  memset: "memset",
  ddp: "DDP",
  pg: "PG",
  id: "id",
  us: "µs",
  r2: "r²",
  gbps: "GB/s",
};

export function humanize(key: string): string {
  const words = key.split(/[_.]+/).filter(Boolean).map((w) => WORDS[w] ?? w);
  const text = words.join(" ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}


// Names (kernels, ops) shortened in the middle so that names that look alike stay apart.
// A name up to `max` characters is kept. A longer one keeps its first `head` characters
// (what it is) and then the part that tells it from the most similar other name of the
// list: from just before the first character where it differs from that name (the
// longest common prefix), as much as fits; "…" marks each cut. Without a similar name
// the kept part is the end of the name (its distinguishing tail). The full name stays on
// hover (nameCell).
export const NAME_MAX = 48;

export function shortenNames(names: string[], max = NAME_MAX, head = 14): string[] {
  const common = (a: string, b: string): number => {
    const n = Math.min(a.length, b.length);
    let i = 0;
    while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i += 1;
    return i;
  };
  const room = max - head - 1; // after the head and its "…"
  // `name` cut to show where it differs from a name sharing its first `prefix` characters
  const cut = (name: string, prefix: number): string => {
    if (name.length <= max) return name;
    if (prefix <= head) return `${name.slice(0, head)}…${name.slice(name.length - room)}`;
    // start a little before the difference, so it reads in context
    const start = Math.min(Math.max(head, prefix - 4), name.length - room + 1);
    const end = start + room - 1;
    return end >= name.length ? `${name.slice(0, head)}…${name.slice(name.length - room)}` : `${name.slice(0, head)}…${name.slice(start, end)}…`;
  };
  const closest = (name: string, among: string[]): number =>
    among.reduce((best, other) => (other !== name ? Math.max(best, common(name, other)) : best), 0);
  const out = names.map((name) => cut(name, closest(name, names)));
  // two names cut alike (each cut where it differs from a third one): cut each where it
  // differs from the other(s) of its group instead
  for (let round = 0; round < 3; round += 1) {
    const groups = new Map<string, number[]>();
    out.forEach((text, i) => groups.set(text, [...(groups.get(text) ?? []), i]));
    let again = false;
    for (const members of groups.values()) {
      const distinct = new Set(members.map((i) => names[i]));
      if (distinct.size < 2) continue;
      const group = [...distinct];
      for (const i of members) out[i] = cut(names[i], closest(names[i], group));
      again = true;
    }
    if (!again) break;
  }
  return out;
}
