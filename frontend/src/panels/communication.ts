import { chart } from "../charts";
import { el, kpis, nameCell, notes, table } from "../dom";
import { fmtBandwidth, fmtBytes, fmtCount, fmtDuration, fmtPercent, humanize, isNum } from "../format";
import { DEFINITIONS } from "../labels";
import { commOption, ranksOption } from "../options";
import { commPerStep } from "../shape";
import type { Palette } from "../theme";
import type { CommKind, RankRow, RunView, Summary } from "../types";
import { subhead } from "./shell";

export function communicationPanel(s: Summary, p: Palette, acrossRanks: HTMLElement | null): Node[] | string {
  const c = s.communication;
  if (!c) return "This summary has no communication data.";
  const out: Node[] = [];
  if (!c.has_collectives) {
    out.push(
      el(
        "div",
        { className: "state empty" },
        "No NCCL/RCCL communication kernels in this trace: a single-process job, or the collectives ran outside the profiled steps.",
      ),
    );
    if (acrossRanks) out.push(acrossRanks);
    return out;
  }
  out.push(
    kpis([
      {
        label: "exposed communication",
        value: fmtPercent(c.exposed_fraction),
        sub: "of step time",
        definition: DEFINITIONS.exposed_fraction,
        tone: isNum(c.exposed_fraction) ? (c.exposed_fraction >= 0.3 ? "bad" : c.exposed_fraction >= 0.1 ? "warn" : "good") : "",
      },
      { label: "exposed per step", value: fmtDuration(c.mean_exposed_us), definition: DEFINITIONS.exposed_us_per_step },
      { label: "communication", value: fmtPercent(c.comm_fraction), sub: "of step time", definition: DEFINITIONS.comm_fraction },
      { label: "overlapped", value: fmtPercent(c.overlap_fraction), sub: "of communication", definition: DEFINITIONS.overlap_fraction },
      { label: "collectives", value: fmtCount(c.collective_count), sub: isNum(c.world_size) ? `world size ${c.world_size}` : undefined, definition: "Collective calls in the trace (one call may run several kernels)." },
    ]),
  );
  const data = commPerStep(c);
  if (data.steps.length) {
    out.push(
      subhead("Exposed vs overlapped, per step", "Communication time (union of NCCL/RCCL kernels) in each step window, split into the part hidden under compute kernels on the same device and the exposed rest."),
      chart(commOption(data, p), "Communication per step: exposed and overlapped with compute").node,
    );
  }
  out.push(
    subhead("Per collective kind", "Bandwidth as nccl-tests reports it: algorithm bandwidth = message size ÷ collective time; bus bandwidth = algorithm bandwidth × 2(n−1)/n for AllReduce, (n−1)/n for AllGather, ReduceScatter, AllToAll, 1 for Broadcast and Reduce."),
    table<CommKind>(
      [
        { header: "Kind", cell: (k) => humanize(k.kind), cellTitle: (k) => `Collective kind: ${k.kind}` },
        { header: "Calls", numeric: true, title: "Collective calls of this kind.", cell: (k) => fmtCount(k.count) },
        { header: "Time", numeric: true, title: "Kernel time of these calls (first kernel start to last kernel end, summed).", cell: (k) => fmtDuration(k.time_us) },
        { header: "Mean", numeric: true, title: "Time ÷ calls.", cell: (k) => fmtDuration(k.mean_us) },
        {
          header: "Bytes",
          numeric: true,
          title: "Message size (In msg nelems × dtype size), summed over calls with a known size.",
          cell: (k) => (isNum(k.bytes) ? fmtBytes(k.bytes) : "not recorded"),
        },
        { header: "Alg. BW", numeric: true, title: "Algorithm bandwidth: bytes ÷ time, GB/s (1e9 bytes/s).", cell: (k) => fmtBandwidth(k.algbw_gbps) },
        { header: "Bus BW", numeric: true, title: "Bus bandwidth: algorithm bandwidth × the nccl-tests factor for the kind and group size n; compare with the link's peak.", cell: (k) => fmtBandwidth(k.busbw_gbps) },
        { header: "Group", numeric: true, title: "Group sizes n seen for this kind.", cell: (k) => (k.group_sizes?.length ? k.group_sizes.join(", ") : "n/a") },
      ],
      c.kinds ?? [],
    ),
  );
  const dd = c.ddp_bucket_bytes;
  if (dd && isNum(dd.count) && dd.count > 0) {
    out.push(
      el(
        "p",
        { className: "note", title: "AllReduce message sizes: with DDP each is one gradient bucket (bucket_cap_mb)." },
        `AllReduce sizes (DDP buckets): ${fmtCount(dd.count)} calls, median ${fmtBytes(dd.median_bytes)}, from ${fmtBytes(dd.min_bytes)} to ${fmtBytes(dd.max_bytes)}, ${fmtCount(dd.distinct_count)} distinct sizes.`,
      ),
    );
  }
  if (acrossRanks) out.push(acrossRanks);
  const n = notes(c.notes);
  if (n) out.push(n);
  return out;
}

// The run view across ranks (run_summary): per-rank table and chart, skew, straggler.
export function ranksSection(view: RunView | null | undefined, p: Palette, errors?: Record<string, string>): Node[] {
  if (!view) return [el("p", { className: "muted" }, "No view across ranks.")];
  const ranks = view.ranks ?? [];
  const straggler = view.straggler;
  const out: Node[] = [];
  const skew = view.skew_us ?? {};
  out.push(
    kpis([
      { label: "ranks profiled", value: fmtCount(view.worker_count), sub: isNum(view.world_size) ? `of world size ${view.world_size}` : undefined, definition: "Workers (trace files) of this run; ranks from distributedInfo when every file has it, else the worker order." },
      { label: "matched collectives", value: fmtCount(view.matched_count), definition: "Collectives found on every rank of their process group and matched across ranks." },
      { label: "median start skew", value: fmtDuration(skew.median_us), definition: DEFINITIONS.skew_median_us },
      { label: "max start skew", value: fmtDuration(skew.max_us), definition: "Largest start skew (latest − earliest start of the same collective across ranks)." },
      {
        label: "straggler",
        value: straggler && isNum(straggler.rank) ? `rank ${straggler.rank}` : "none",
        sub: straggler && isNum(straggler.last_fraction) ? `last in ${fmtPercent(straggler.last_fraction, 0)}` : undefined,
        definition: "The rank that arrives last most often at matched collectives. " + DEFINITIONS.last_fraction,
        tone: straggler ? "bad" : "good",
      },
    ]),
  );
  if (ranks.length) {
    out.push(chart(ranksOption(ranks, p, straggler && isNum(straggler.rank) ? straggler.rank : null), "Per-rank step time, communication, exposed communication and waiting time").node);
    out.push(
      table<RankRow>(
        [
          { header: "Rank", cell: (r) => `${r.rank}${straggler && r.rank === straggler.rank ? " (straggler)" : ""}` },
          { header: "Worker", className: "name-col", cell: (r) => nameCell(r.worker) },
          { header: "Steps", numeric: true, cell: (r) => fmtCount(r.step_count), title: "Profiled steps of this rank." },
          { header: "Step time", numeric: true, title: "Mean step time of this rank.", cell: (r) => fmtDuration(r.mean_step_us) },
          { header: "Comm.", numeric: true, title: "Mean communication time per step.", cell: (r) => fmtDuration(r.mean_comm_us) },
          { header: "Exposed", numeric: true, title: "Mean exposed communication per step.", cell: (r) => fmtDuration(r.mean_exposed_us) },
          { header: "Last at", numeric: true, title: DEFINITIONS.last_fraction, cell: (r) => `${fmtPercent(r.last_fraction, 0)} (${fmtCount(r.last_count)}/${fmtCount(r.matched_count)})` },
          { header: "Lateness", numeric: true, title: DEFINITIONS.mean_lateness_us, cell: (r) => fmtDuration(r.mean_lateness_us) },
          { header: "Waited", numeric: true, title: DEFINITIONS.mean_wait_us, cell: (r) => fmtDuration(r.mean_wait_us) },
        ],
        ranks,
      ),
    );
  }
  const skews = view.largest_skews ?? [];
  if (skews.length) {
    out.push(
      subhead("Largest start skews", "Collectives where the ranks started furthest apart; offsets from the earliest rank."),
      table(
        [
          { header: "Step", cell: (r) => (isNum(r.step) ? `#${r.step}` : "n/a") },
          { header: "Kind", cell: (r) => humanize(r.kind ?? "") },
          { header: "Group", cell: (r) => r.pg ?? "n/a", title: "Process group." },
          { header: "Skew", numeric: true, title: "Latest − earliest start of this collective across ranks.", cell: (r) => fmtDuration(r.skew_us) },
          { header: "Last rank", numeric: true, cell: (r) => (isNum(r.last_rank) ? String(r.last_rank) : "n/a") },
          {
            header: "Start offsets",
            title: "Each rank's start minus the earliest start.",
            cell: (r) =>
              Object.entries(r.start_offsets_us ?? {})
                .map(([rank, v]) => `r${rank}: ${fmtDuration(v)}`)
                .join(", "),
          },
        ],
        skews,
        { limit: 5 },
      ),
    );
  }
  const errs = Object.entries(errors ?? {});
  if (errs.length) out.push(el("ul", { className: "notes error" }, ...errs.map(([w, m]) => el("li", null, `${w}: ${m}`))));
  const n = notes(view.notes);
  if (n) out.push(n);
  return out;
}
