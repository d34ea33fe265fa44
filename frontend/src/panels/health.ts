import { el, kpis, kvTable, nameCell, table } from "../dom";
import { fmtBytes, fmtCount, humanize, isNum } from "../format";
import { countRows } from "../shape";
import type { DamagedRegion, HealthPanel, Summary } from "../types";
import { col, row, subhead } from "./shell";

function total(counts: Record<string, unknown> | null | undefined): number {
  return countRows(counts as Record<string, number>).reduce((a, [, n]) => a + n, 0);
}

function countsTable(counts: Record<string, unknown> | null | undefined, what: string): HTMLElement {
  const rows = countRows(counts as Record<string, number>);
  if (!rows.length) return el("p", { className: "muted" }, `No ${what}.`);
  return table(
    [
      { header: "What", cell: (r: [string, number]) => el("span", { className: "mono" }, r[0]) },
      { header: "Events", numeric: true, cell: (r: [string, number]) => fmtCount(r[1]) },
    ],
    rows,
    { limit: 8, className: "compact" },
  );
}

export function healthPanel(s: Summary): Node[] | string {
  const h: HealthPanel | undefined = s.health;
  if (!h) return "This summary has no trace-health data.";
  const skipped = total(h.skipped);
  const quarantined = total(h.quarantined);
  const repaired = total(h.repairs);
  const lost = total(h.kineto_record_counts);
  const out: Node[] = [
    kpis([
      { label: "events read", value: fmtCount(h.event_count), definition: "Trace events the reader kept." },
      { label: "skipped", value: fmtCount(skipped), definition: "Events the reader dropped (unknown or unusable), by reason below.", tone: skipped ? "warn" : "good" },
      { label: "quarantined", value: fmtCount(quarantined), definition: "Events with damaged values (absurd durations, bad timestamps) kept out of the analysis.", tone: quarantined ? "warn" : "good" },
      { label: "repaired", value: fmtCount(repaired), definition: "Damage the reader fixed (N/A, NaN tokens, lone backslashes, …).", tone: repaired ? "warn" : "" },
      { label: "file", value: fmtBytes(h.file_bytes), sub: h.compressed ? `gzip; ${fmtBytes(h.json_bytes)} of JSON once inflated` : `${fmtBytes(h.json_bytes)} of JSON`, definition: "Size of the trace file on disk, and of its JSON text (after gzip decompression for a .gz file)." },
    ]),
  ];
  const cut = h.trace_quality?.lost;
  if (cut && isNum(cut.file_ends_at_byte)) {
    // a gzip stream that ends where it should (gzip -t passes): the JSON was cut before
    const gzipWhole = !(h.damage ?? []).some((d) => d.problem.startsWith("gzip stream ends early") || d.problem.startsWith("corrupt gzip"));
    out.push(
      el(
        "div",
        { className: "state warning" },
        `${!h.compressed ? `The file ends at byte ${fmtCount(cut.file_ends_at_byte)} (cut short: a job killed while writing, or a copy still in progress)` : gzipWhole ? `The JSON inside the gzip file ends early, at byte ${fmtCount(cut.file_ends_at_byte)} once inflated (the gzip data itself is whole: the JSON was cut before it was compressed)` : `The gzip file (${fmtCount(h.file_bytes)} bytes compressed) is cut short or damaged; its JSON breaks at byte ${fmtCount(cut.file_ends_at_byte)} once inflated (cut short: a job killed while writing, or a copy still in progress)`}. Lost: ${(cut.lost ?? []).join("; ")}.`,
      ),
    );
  }
  const damage = h.damage ?? [];
  if (damage.length) {
    out.push(
      subhead("Damaged regions", `Every region of the file the reader could not read (${fmtCount(h.damaged_regions)} in all, ${fmtBytes(h.lost_bytes)} and ${fmtCount(h.lost_events)} events lost), by byte offset.`),
      table(
        [
          { header: "Byte offset", numeric: true, cell: (d: DamagedRegion) => fmtCount(d.offset) },
          { header: "Bytes", numeric: true, title: "Length of the damaged region.", cell: (d: DamagedRegion) => fmtCount(d.bytes) },
          { header: "Events lost", numeric: true, cell: (d: DamagedRegion) => fmtCount(d.events) },
          { header: "Problem", className: "name-col", cell: (d: DamagedRegion) => nameCell(d.problem, d.problem) },
        ],
        damage,
        { limit: 20 },
      ),
    );
  }
  const logProblems = (h.kineto_log ?? []).filter((line) => /\b(ERROR|WARNING)\b/.test(line)).length;
  if (lost || logProblems) {
    out.push(
      el(
        "div",
        { className: "state warning" },
        `Kineto reported problems while recording (${logProblems ? `${logProblems} warning or error lines in its log` : "record counts"}, below): some events may be missing.`,
      ),
    );
  }
  out.push(
    row(
      col(subhead("Events by kind"), countsTable(h.kind_counts, "events")),
      col(subhead("Skipped", "Events the reader dropped, by reason."), countsTable(h.skipped, "skipped events"), subhead("Quarantined"), countsTable(h.quarantined, "quarantined events"), subhead("Repaired"), countsTable(h.repairs, "repairs")),
    ),
  );
  const flags = Object.entries(h.flags ?? {});
  const meta = h.metadata ?? {};
  const dev = (h.device_properties ?? [])[0] as Record<string, unknown> | undefined;
  const info: [string, Node | string, string?][] = [
    ["File", nameCell(h.path ?? "n/a")],
    ["Recorded with", flags.length ? flags.map(([k, v]) => `${v ? "✓" : "✗"} ${humanize(k.replace(/^has_/, ""))}`).join("  ") : "n/a", "What the trace contains."],
  ];
  if (dev) {
    info.push(["GPU", `${String(dev.name ?? "n/a")}${isNum(dev.totalGlobalMem) ? `, ${fmtBytes(dev.totalGlobalMem as number)}` : ""}${isNum(dev.numSms) ? `, ${dev.numSms} SMs` : ""}`, "deviceProperties of the first device."]);
  }
  if (h.distributed_info) {
    const d = h.distributed_info;
    info.push(["Distributed", `rank ${String(d.rank ?? "?")} of ${String(d.world_size ?? "?")}, backend ${String(d.backend ?? "?")}`]);
  }
  const metaLabels: [string, string][] = [
    ["schemaVersion", "Trace schema version"],
    ["cupti_version", "CUPTI version"],
    ["cuda_runtime_version", "CUDA runtime version"],
    ["cuda_driver_version", "CUDA driver version"],
  ];
  for (const [key, label] of metaLabels) {
    if (meta[key] !== undefined) info.push([label, String(meta[key])]);
  }
  out.push(subhead("Trace"), kvTable(info));
  if (h.kineto_log?.length) {
    out.push(subhead("Kineto's log"), el("pre", { className: "log" }, h.kineto_log.join("\n")));
  }
  if (lost) out.push(subhead("Kineto record counts"), countsTable(h.kineto_record_counts, "records"));
  return out;
}
