import { chart } from "../charts";
import { el, kpis, nameCell, notes, table } from "../dom";
import { fmtBandwidth, fmtBytes, fmtCount, fmtDuration, fmtPercent, humanize, isNum } from "../format";
import { DEFINITIONS } from "../labels";
import { commOption, rankDistributionOption, ranksOption } from "../options";
import {
  MANY_RANKS,
  RANK_TABLE_LIMIT,
  WORST_RANKS,
  busbwBasisText,
  commPerStep,
  latenessPerCollective,
  rankDistribution,
  rankPerStep,
  stragglerStory,
  worstRanks,
} from "../shape";
import type { Palette } from "../theme";
import type { CollectiveKind, RankRow, RunCollectiveKind, RunView, Summary } from "../types";
import { subhead } from "./shell";

// runKinds: the run's bandwidth per kind from the matched transfer (view across ranks),
// when the run has several ranks and the view has arrived: every rank shows these, the
// same on every rank. Without it the trace's own least-wait estimate is shown as what
// it is: a lower bound, peers not profiled.
export function communicationPanel(s: Summary, p: Palette, acrossRanks: HTMLElement | null, runKinds?: RunCollectiveKind[] | null): Node[] | string {
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
      { label: "exposed /step", value: fmtDuration(c.mean_exposed_us), definition: DEFINITIONS.exposed_us_per_step },
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
  const matched = runKinds?.length ? new Map(runKinds.map((k) => [k.kind, k])) : null;
  out.push(
    subhead("Per collective kind", "Bandwidth as nccl-tests reports it: algorithm bandwidth = message size ÷ collective time; bus bandwidth = algorithm bandwidth × 2(n−1)/n for AllReduce, (n−1)/n for AllGather, ReduceScatter, AllToAll, 1 for Broadcast and Reduce."),
    table<CollectiveKind>(
      [
        { header: "Kind", cell: (k) => humanize(k.kind), cellTitle: (k) => `Collective kind: ${k.kind}` },
        { header: "Calls total", numeric: true, title: "Collective calls of this kind in the trace.", cell: (k) => fmtCount(k.count) },
        { header: "Calls /step", numeric: true, title: "Collective calls of this kind per step.", cell: (k) => (isNum(k.calls_per_step) ? k.calls_per_step.toFixed(1) : "n/a") },
        { header: "Time total", numeric: true, title: "Kernel time of these calls (first kernel start to last kernel end, summed over the trace); includes waiting for the other ranks.", cell: (k) => fmtDuration(k.time_us) },
        { header: "Time per collective", numeric: true, title: "Time total ÷ calls; includes waiting for the other ranks.", cell: (k) => fmtDuration(k.mean_us) },
        {
          header: "Bytes total",
          numeric: true,
          title: "Message size (In msg nelems × dtype size), summed over calls with a known size.",
          cell: (k) => (isNum(k.bytes) ? fmtBytes(k.bytes) : "not recorded"),
        },
        {
          header: "Bytes per collective",
          numeric: true,
          title: "Median message size of one call (mean when the median is not in the summary).",
          cell: (k) => (isNum(k.median_bytes) ? fmtBytes(k.median_bytes) : isNum(k.bytes) && isNum(k.sized_count) && k.sized_count > 0 ? `${fmtBytes(k.bytes / k.sized_count)} (mean)` : "n/a"),
        },
        {
          header: "Alg. BW",
          numeric: true,
          title: "Algorithm bandwidth: bytes ÷ time, GB/s (1e9 bytes/s); with several ranks, time = the matched transfer.",
          cell: (k) => fmtBandwidth(matched ? (matched.get(k.kind)?.algbw_gbps ?? null) : k.algbw_gbps),
          cellTitle: (k) => busbwBasisText(matched?.get(k.kind) ? "matched_transfer" : k.busbw_basis),
        },
        {
          header: matched ? "Bus BW (all ranks)" : "Bus BW (lower bound)",
          numeric: true,
          title: matched
            ? "Bus bandwidth from the matched transfer across the ranks of this run (the time every rank is inside the collective), the same on every rank; × the nccl-tests factor for the kind and group size n."
            : "Bus bandwidth estimated from this trace alone (peers not profiled): a lower bound from the collectives that waited least; × the nccl-tests factor for the kind and group size n. Hover a value for what it was computed from.",
          cell: (k) => fmtBandwidth(matched ? (matched.get(k.kind)?.busbw_gbps ?? null) : k.busbw_gbps),
          cellTitle: (k) => busbwBasisText(matched?.get(k.kind) ? "matched_transfer" : k.busbw_basis),
        },
        { header: "Group size", numeric: true, title: "Ranks n in the process groups of this kind's collectives (the n of the bus-bandwidth factor).", cell: (k) => (k.group_sizes?.length ? k.group_sizes.join(", ") : "n/a") },
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
// Words, one meaning each: skew = latest − earliest start of one matched collective;
// waited = latest start − this rank's start; lateness = this rank's start − earliest.
// Labels say /step, per collective or total.
export function ranksSection(view: RunView | null | undefined, p: Palette, errors?: Record<string, string>): Node[] {
  if (!view) return [el("p", { className: "muted" }, "No view across ranks.")];
  const ranks = view.ranks ?? [];
  const straggler = view.straggler;
  const out: Node[] = [];
  const skew = view.skew_us ?? {};
  const delay = straggler && isNum(straggler.delay_us_per_step) ? straggler.delay_us_per_step : null;
  out.push(
    kpis([
      { label: "ranks profiled", value: fmtCount(view.worker_count), sub: isNum(view.world_size) ? `of world size ${view.world_size}` : undefined, definition: "Workers (trace files) of this run; ranks from distributedInfo when every file has it, else the worker order." },
      { label: "matched collectives", value: fmtCount(view.matched_count), sub: "total", definition: "Collectives found on every rank of their process group and matched across ranks." },
      { label: "skew per collective", value: fmtDuration(skew.median_us), sub: "median", definition: DEFINITIONS.skew_median_us },
      { label: "max skew per collective", value: fmtDuration(skew.max_us), definition: "Largest skew (latest − earliest start of the same collective across ranks)." },
      {
        label: "straggler",
        value: straggler && isNum(straggler.rank) ? `rank ${straggler.rank}` : "none",
        sub:
          delay !== null
            ? `costs the others ${fmtDuration(delay)}/step${isNum(straggler?.share_of_step) ? ` (${fmtPercent(straggler?.share_of_step, 0)} of step)` : ""}`
            : straggler && isNum(straggler.last_fraction)
              ? `last in ${fmtPercent(straggler.last_fraction, 0)}`
              : undefined,
        definition: "A rank whose per-step lateness stands out from the other ranks' beyond the step-to-step noise, and whose lateness costs the others a share of the step. " + DEFINITIONS.delay_us_per_step,
        tone: straggler ? "bad" : "good",
      },
    ]),
  );
  const story = stragglerStory(straggler);
  if (story) {
    // one explained breakdown of what the others lose, then why the rank is late
    out.push(el("p", { className: "note straggler-breakdown", title: `${DEFINITIONS.others_wait_us_per_step} ${DEFINITIONS.delay_us_per_step}` }, story));
  }
  if (ranks.length) {
    const hasTransfer = ranks.some((r) => isNum(rankPerStep(r, "transfer")));
    const perStep = (part: "wait" | "transfer" | "exposed_wait" | "exposed_transfer") => (r: RankRow) => fmtDuration(rankPerStep(r, part));
    const stragglerRank = straggler && isNum(straggler.rank) ? straggler.rank : null;
    const many = ranks.length > MANY_RANKS;
    if (many) {
      // one bar per rank is unreadable past a few dozen ranks: distributions, worst ranks
      out.push(subhead(`Distribution across ${fmtCount(ranks.length)} ranks`, "How many ranks fall in each range of the value; the straggler's bin is red where it stands apart (a tenth of the ranks or fewer). Hover a bar for the ranks in it."));
      const dists: [string, (r: RankRow) => number | null, string][] = [
        ["Lateness per collective", latenessPerCollective, DEFINITIONS.mean_lateness_us],
        ["Waited /step", (r) => rankPerStep(r, "wait"), DEFINITIONS.wait_us_per_step],
        ["Step time", (r) => (isNum(r.mean_step_us) ? r.mean_step_us : null), "Mean step time of the rank."],
      ];
      for (const [label, value, scope] of dists) {
        const d = rankDistribution(ranks, value, stragglerRank);
        if (d.counts.length) out.push(chart(rankDistributionOption(d, p, { axis: label, scope }), `Ranks by ${label.toLowerCase()}`, 200).node);
      }
      const worst = worstRanks(ranks, WORST_RANKS);
      if (worst.length) {
        out.push(
          subhead(`Worst ${worst.length} ranks`, "By delay caused per step (how much earlier the others could start without this rank, median over steps), then lateness per collective."),
          table<RankRow>(
            [
              { header: "Rank", cell: (r) => `${r.rank}${r.rank === stragglerRank ? " (straggler)" : ""}` },
              { header: "Worker", className: "name-col", cell: (r) => nameCell(r.worker) },
              { header: "Delay caused /step", numeric: true, title: DEFINITIONS.delay_us_per_step, cell: (r) => fmtDuration(r.delay_caused_us_per_step) },
              { header: "Lateness per collective", numeric: true, title: DEFINITIONS.mean_lateness_us, cell: (r) => fmtDuration(latenessPerCollective(r)) },
              { header: "Last at", numeric: true, title: DEFINITIONS.last_fraction, cell: (r) => `${fmtPercent(r.last_fraction, 0)} (${fmtCount(r.last_count)}/${fmtCount(r.matched_count)})` },
              { header: "Step time", numeric: true, cell: (r) => fmtDuration(r.mean_step_us) },
            ],
            worst,
          ),
        );
      }
      out.push(subhead("All ranks", `${fmtCount(ranks.length)} ranks in rank order; the first ${RANK_TABLE_LIMIT} are shown, "show all" lists the rest.`));
    } else {
      out.push(chart(ranksOption(ranks, p, stragglerRank), "Per-rank step time, communication, exposed communication and waited, all per step").node);
    }
    out.push(
      table<RankRow>(
        [
          { header: "Rank", cell: (r) => `${r.rank}${straggler && r.rank === straggler.rank ? " (straggler)" : ""}` },
          { header: "Worker", className: "name-col", cell: (r) => nameCell(r.worker) },
          { header: "Steps", numeric: true, cell: (r) => fmtCount(r.step_count), title: "Profiled steps of this rank." },
          { header: "Step time", numeric: true, title: "Mean step time of this rank.", cell: (r) => fmtDuration(r.mean_step_us) },
          { header: "Comm. /step", numeric: true, title: "Communication time (union of NCCL/RCCL kernels) per step, mean.", cell: (r) => fmtDuration(r.mean_comm_us) },
          { header: "Exposed /step", numeric: true, title: "Communication not hidden under compute, per step, mean.", cell: (r) => fmtDuration(r.mean_exposed_us) },
          { header: "Waited /step", numeric: true, title: DEFINITIONS.wait_us_per_step, cell: perStep("wait") },
          ...(hasTransfer
            ? [
                { header: "Transfer /step", numeric: true, title: DEFINITIONS.transfer_us_per_step, cell: perStep("transfer") },
                { header: "Exposed waited /step", numeric: true, title: DEFINITIONS.exposed_wait_us_per_step, cell: perStep("exposed_wait") },
                { header: "Exposed transfer /step", numeric: true, title: DEFINITIONS.exposed_transfer_us_per_step, cell: perStep("exposed_transfer") },
              ]
            : []),
          { header: "Last at", numeric: true, title: DEFINITIONS.last_fraction, cell: (r) => `${fmtPercent(r.last_fraction, 0)} (${fmtCount(r.last_count)}/${fmtCount(r.matched_count)})` },
          { header: "Lateness per collective", numeric: true, title: DEFINITIONS.mean_lateness_us, cell: (r) => fmtDuration(latenessPerCollective(r)) },
        ],
        ranks,
        many ? { limit: RANK_TABLE_LIMIT } : {},
      ),
    );
  }
  const kinds = view.kinds ?? [];
  if (kinds.length) {
    out.push(
      subhead("Bandwidth across ranks", "Per collective kind, from the transfer of each matched collective (earliest end − latest start): the waiting is left out, so the value is the same on every rank."),
      table<RunCollectiveKind>(
        [
          { header: "Kind", cell: (k) => humanize(k.kind) },
          { header: "Matched", numeric: true, title: "Matched collectives of this kind, total.", cell: (k) => fmtCount(k.matched_count) },
          { header: "Calls /step", numeric: true, cell: (k) => (isNum(k.calls_per_step) ? k.calls_per_step.toFixed(1) : "n/a") },
          { header: "Bytes per collective", numeric: true, title: "Median message size.", cell: (k) => fmtBytes(k.median_bytes) },
          { header: "Transfer per collective", numeric: true, title: "Median transfer time (earliest end − latest start).", cell: (k) => fmtDuration(k.median_transfer_us) },
          { header: "Alg. BW", numeric: true, cell: (k) => fmtBandwidth(k.algbw_gbps), cellTitle: (k) => busbwBasisText(k.busbw_basis) },
          { header: "Bus BW", numeric: true, cell: (k) => fmtBandwidth(k.busbw_gbps), cellTitle: (k) => busbwBasisText(k.busbw_basis) },
        ],
        kinds,
      ),
    );
  }
  const skews = view.largest_skews ?? [];
  if (skews.length) {
    out.push(
      subhead("Largest skews", "Collectives where the ranks started furthest apart (skew per collective); offsets = lateness of each rank."),
      table(
        [
          { header: "Step", cell: (r) => (isNum(r.step) ? `#${r.step}` : "n/a") },
          { header: "Kind", cell: (r) => humanize(r.kind ?? "") },
          { header: "Process group", cell: (r) => r.pg ?? "n/a", title: "The process group (Process Group Name) the collective ran in." },
          { header: "Skew per collective", numeric: true, title: "Latest − earliest start of this collective across ranks.", cell: (r) => fmtDuration(r.skew_us) },
          { header: "Last rank", numeric: true, cell: (r) => (isNum(r.last_rank) ? String(r.last_rank) : "n/a") },
          {
            header: "Lateness per rank",
            title: "Each rank's start minus the earliest start.",
            cell: (r) =>
              Object.entries(r.start_offsets_us ?? {})
                .map(([rank, v]) => `r${rank}: ${fmtDuration(v)}`)
                .join(", ") + (isNum(r.ranks_not_listed) && r.ranks_not_listed > 0 ? ` (+${fmtCount(r.ranks_not_listed)} ranks not listed)` : ""),
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
