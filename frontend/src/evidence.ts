// Evidence values in their unit: the tab's side of tb_kineto_insights/analysis/
// evidence_units.py, which `report` and `--format markdown` use. The unit of a key comes
// from the same table (EVIDENCE_UNIT_RULES, generated into vocabulary.ts from
// docs/schema/labels.json), matched the same way; each unit is written as Python writes
// it (rounding ties to even, as Python's format does), so one value reads alike in the
// tab, the terminal and a PR comment: test/evidence_cases.json holds the examples both
// sides must write exactly. Pure functions, unit-tested with node --test.

import { EVIDENCE_UNIT_RULES } from "./vocabulary";

export const NA = "n/a";
// Items of a list written before "… (N)".
export const LIST_ITEMS = 8;
const PER_STEP = "_per_step";
// Units that name a thing: <thing>_per_step counts the thing per step.
const NAMING = new Set(["name", "text", "id", "device", "step"]);
const SNAKE = /^[a-z0-9]+(_[a-z0-9]+)+$/;

const RULES: [RegExp, string][] = EVIDENCE_UNIT_RULES.map(([pattern, unit]) => [new RegExp(`^(?:${pattern})$`), unit]);

export interface Unit {
  unit: string;
  perStep: boolean;
}

// The unit of an evidence key: the first rule matching the whole key ("us/step": per
// step), else the first matching it less a trailing _per_step (per step; a named thing
// is then counted), else a count.
export function unitOf(key: string): Unit {
  for (const [re, unit] of RULES) {
    if (re.test(key)) {
      const [name, per] = unit.split("/");
      return { unit: name, perStep: per === "step" };
    }
  }
  if (key.endsWith(PER_STEP)) {
    const base = key.slice(0, -PER_STEP.length);
    for (const [re, unit] of RULES) {
      if (re.test(base)) {
        const name = unit.split("/")[0];
        return { unit: NAMING.has(name) ? "count" : name, perStep: true };
      }
    }
    return { unit: "count", perStep: true };
  }
  return { unit: "count", perStep: false };
}

function isFiniteNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}

// `x` with `digits` decimals as Python's format writes it: the exact binary value
// rounded, a tie (…5 exactly) to the even digit (JavaScript's toFixed rounds ties up).
export function fixed(x: number, digits: number): string {
  const negative = x < 0 || Object.is(x, -0);
  const abs = Math.abs(x);
  let text = abs.toFixed(digits);
  const exact = abs.toFixed(100); // the binary value in full (for |x| ≥ 2^-48)
  const point = exact.indexOf(".");
  const rest = exact.slice(point + 1 + digits);
  if (/^50*$/.test(rest)) {
    // a tie: toFixed went up; Python keeps the even digit
    const kept = exact.slice(0, point + 1 + digits).replace(/\.$/, "");
    const last = Number(kept[kept.length - 1]);
    if (last % 2 === 0) text = kept;
  }
  return `${negative ? "-" : ""}${text}`;
}

// Thousands separators in the whole part of a decimal text ("1234.5" → "1,234.5").
function grouped(text: string): string {
  const negative = text.startsWith("-");
  const body = negative ? text.slice(1) : text;
  const [whole, frac] = body.split(".");
  const withCommas = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return `${negative ? "-" : ""}${withCommas}${frac !== undefined ? `.${frac}` : ""}`;
}

// Python's round(): to the nearest whole number, ties to even.
function roundEven(x: number): number {
  return Number(fixed(x, 0));
}

function plain(value: number, decimals: number): string {
  let text = grouped(fixed(value, decimals));
  if (text.includes(".")) text = text.replace(/0+$/, "").replace(/\.$/, "");
  return text === "-0" || text === "" ? "0" : text;
}

// analysis/units.py fmt_duration_us(us, 2).
export function durationText(us: number): string {
  const size = Math.abs(us);
  if (size < 1e3) return `${fixed(us, 1)} µs`;
  if (size < 1e6) return `${fixed(us / 1e3, 2)} ms`;
  return `${fixed(us / 1e6, 2)} s`;
}

const IEC = ["KiB", "MiB", "GiB", "TiB"];

// analysis/units.py fmt_bytes(n, 2).
export function bytesText(n: number): string {
  if (Math.abs(n) < 1024) return `${fixed(n, 0)} B`;
  let value = n / 1024;
  let unit = 0;
  while (unit < IEC.length - 1 && Math.abs(value) >= 1024) {
    value /= 1024;
    unit += 1;
  }
  return `${fixed(value, 2)} ${IEC[unit]}`;
}

const FLOPS: [number, string][] = [
  [1e12, "TFLOP/s"],
  [1e9, "GFLOP/s"],
  [1e6, "MFLOP/s"],
  [1, "FLOP/s"],
];

function numberText(unit: string, value: number): string {
  switch (unit) {
    case "us":
      return durationText(value);
    case "bytes":
      return bytesText(value);
    case "fraction": {
      const pct = 100 * value;
      if (pct !== 0 && Math.abs(pct) < 0.05) return pct > 0 ? "<0.1 %" : ">-0.1 %";
      return `${fixed(pct, 1)} %`;
    }
    case "flop_rate": {
      const [size, name] = FLOPS.find(([s]) => Math.abs(value) >= s) ?? FLOPS[FLOPS.length - 1];
      return `${grouped(fixed(value / size, 1))} ${name}`;
    }
    case "byte_rate":
      return `${grouped(fixed(value / 1e9, 1))} GB/s`;
    case "gbps":
      return `${grouped(fixed(value, 1))} GB/s`;
    case "times":
      return `${fixed(value, 2)}×`;
    case "steps":
      return `${grouped(String(roundEven(value)))} steps`;
    case "step":
      return `#${roundEven(value)}`;
    case "coefficient":
      return fixed(value, 2);
    case "device":
      return `GPU ${roundEven(value)}`;
    case "id":
      return String(roundEven(value));
    default:
      return plain(value, 2);
  }
}

// One scalar in `unit`, "/step" after it when `perStep`.
export function formatScalar(unit: string, value: unknown, perStep = false): string {
  if (value === null || value === undefined) return NA;
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "string") {
    const spaced = unit !== "name" && unit !== "device" && SNAKE.test(value);
    return spaced ? value.replace(/_/g, " ") : value;
  }
  if (!isFiniteNumber(value)) return NA;
  return numberText(unit, value) + (perStep ? "/step" : "");
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function inner(unit: string, perStep: boolean, value: unknown, keyText: (k: string) => string): string {
  if (isRecord(value) || Array.isArray(value)) return formatEvidence("value", value, keyText);
  return formatScalar(unit, value, perStep);
}

// An evidence value in its key's unit (evidence_units.format_evidence); `keyText`: how
// a mapping's keys are shown (as they are by default, as Python writes them).
export function formatEvidence(key: string, value: unknown, keyText: (k: string) => string = (k) => k): string {
  const { unit, perStep } = unitOf(key);
  if (isRecord(value)) {
    const entries = Object.entries(value);
    const known = entries.filter(([, v]) => v !== null && v !== undefined);
    if (!known.length) return "none"; // {} or every entry unknown
    const steps = entries.every(([k]) => /^\d+$/.test(k));
    // a key that names no unit holds a record (a test's figures): each field in its own unit
    if (unit === "count" && !perStep && !steps) return known.map(([k, v]) => `${keyText(k)}: ${formatEvidence(k, v, keyText)}`).join(", ");
    return known
      .map(([k, v]) => `${steps ? `#${k}` : keyText(k)}: ${inner(unit, perStep && !steps, v, keyText)}`)
      .join(", ");
  }
  if (Array.isArray(value)) {
    if (value.length && value.every(isRecord)) return (value as Record<string, unknown>[]).map(recordText).join("; ");
    const items = value.slice(0, LIST_ITEMS).map((v) => inner(unit, false, v, keyText));
    if (!items.length) return "none";
    return items.join(", ") + (value.length > LIST_ITEMS ? `, … (${value.length})` : "");
  }
  return formatScalar(unit, value, perStep);
}

// An evidence value left out (evidence_units.says_nothing): null, an empty list or
// object, or an object whose every value is null (an empty row was shown for it).
export function saysNothing(value: unknown): boolean {
  if (value === null || value === undefined) return true;
  if (Array.isArray(value)) return !value.length;
  if (isRecord(value)) return Object.values(value).every((v) => v === null || v === undefined);
  return false;
}

function recordText(record: Record<string, unknown>): string {
  return Object.entries(record)
    .filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => `${k} ${formatEvidence(k, v)}`)
    .join(", ");
}
