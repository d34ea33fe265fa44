import assert from "node:assert/strict";
import { test } from "node:test";

import { rankDistributionOption } from "../src/options";
import { MANY_RANKS, RANKS_NAMED_PER_BIN, rankDistribution, spansComparedText, worstRanks } from "../src/shape";
import { palette } from "../src/theme";
import type { RankRow } from "../src/types";
import { partial } from "./fixture";

const light = palette(false);

// 1,024 ranks: lateness 0..49 µs by rank (rank % 50), rank 341 the straggler at 20 ms;
// ranks 1000.. have no value; rank 341 also causes 19.5 ms of delay per step.
function manyRanks(): RankRow[] {
  const rows: RankRow[] = [];
  for (let r = 0; r < 1024; r++) {
    rows.push(
      partial<RankRow>({
      rank: r,
      worker: `rank${r}`,
      mean_step_us: 38_000 + (r % 7),
      lateness_us_per_collective: r >= 1000 ? null : r === 341 ? 20_000 : r % 50,
      delay_caused_us_per_step: r === 341 ? 19_500 : r % 100 === 0 ? 30 : 0,
      last_fraction: null,
      }),
    );
  }
  return rows;
}

test("rank distribution: 1,024 ranks in 20 bins, straggler alone in the top bin", () => {
  const rows = manyRanks();
  assert.ok(rows.length > MANY_RANKS);
  const d = rankDistribution(rows, (r) => r.lateness_us_per_collective ?? null, 341);
  assert.equal(d.total, 1024);
  assert.equal(d.missing, 24);
  assert.equal(d.counts.length, 20);
  assert.equal(d.counts.reduce((a, b) => a + b, 0), 1000);
  // width (20000 − 0) / 20 = 1000 µs: every 0..49 µs rank is in bin 0, 341 in bin 19
  assert.equal(d.counts[0], 999);
  assert.equal(d.counts[19], 1);
  assert.deepEqual(d.ranks[19], [341]);
  assert.deepEqual(d.flagged.map((f, i) => (f ? i : -1)).filter((i) => i >= 0), [19]);
  assert.deepEqual(d.standsOut, d.flagged);
  assert.equal(d.ranks[0].length, RANKS_NAMED_PER_BIN);
  assert.deepEqual(d.ranks[0], [0, 1, 2, 3, 4]);
  assert.equal(d.counts.slice(1, 19).reduce((a, b) => a + b, 0), 0);
  assert.equal(d.ranges[19], "19 ms ≤ value ≤ 20 ms");
  assert.equal(d.ranges[0], "0 µs ≤ value < 1 ms");
});

test("rank distribution: equal values give one bin, no values none", () => {
  const rows = manyRanks().map((r) => ({ ...r, mean_step_us: 5000 }));
  const d = rankDistribution(rows, (r) => r.mean_step_us ?? null, null);
  assert.deepEqual(d.counts, [1024]);
  assert.deepEqual(d.flagged, [false]);
  // the straggler among every rank in one bin does not stand out
  const all = rankDistribution(rows, (r) => r.mean_step_us ?? null, 341);
  assert.deepEqual([all.flagged, all.standsOut], [[true], [false]]);
  const none = rankDistribution(rows, () => null, null);
  assert.deepEqual(none.counts, []);
  assert.equal(none.missing, 1024);
});

test("worst ranks: top 10 by delay caused, then lateness, rank order", () => {
  const worst = worstRanks(manyRanks());
  assert.equal(worst.length, 10);
  assert.equal(worst[0].rank, 341);
  // ranks 0, 100, ..., 900 cause 30 µs; their lateness is 0 (r % 50 = 0): rank order
  assert.deepEqual(
    worst.slice(1).map((r) => r.rank),
    [0, 100, 200, 300, 400, 500, 600, 700, 800],
  );
  assert.deepEqual(worstRanks([partial<RankRow>({ rank: 0, worker: "a", delay_caused_us_per_step: 0, lateness_us_per_collective: 0 })]), []);
});

test("rank distribution chart: one bar per bin, the straggler's bin in the bad colour", () => {
  const d = rankDistribution(manyRanks(), (r) => r.lateness_us_per_collective ?? null, 341);
  const option = rankDistributionOption(d, light, { axis: "Lateness per collective", scope: "x" });
  const series = option.series as { data: { value: number | null; itemStyle: { color: string } }[] }[];
  assert.equal(series.length, 1);
  assert.equal(series[0].data.length, 20);
  assert.equal(series[0].data[19].itemStyle.color, light.bad);
  assert.equal(series[0].data[0].itemStyle.color, light.accent);
  assert.equal(series[0].data[0].value, 999);
  assert.equal(series[0].data[19].value, 1);
  assert.equal(series[0].data[5].value, null); // empty bin: no bar
  assert.deepEqual((option.xAxis as { data: string[] }).data.length, 20);
});

test("rank distribution: values closer than the labels show share fewer bins", () => {
  // step times 38,400 .. 38,406 µs: 20 bins would all read "38.4 ms"
  const rows = Array.from({ length: 1024 }, (_, r) => partial<RankRow>({ rank: r, worker: `rank${r}`, mean_step_us: 38_400 + (r % 7) }));
  const d = rankDistribution(rows, (r) => r.mean_step_us ?? null, null);
  assert.equal(new Set(d.labels).size, d.labels.length);
  assert.deepEqual(d.counts, [1024]);
  assert.equal(d.ranges[0], "38.4 ms ≤ value ≤ 38.4 ms");
});

test("spans compared: the first 8 named, then a count", () => {
  const spans = Array.from({ length: 1024 }, (_, r) => ({ worker: `rank${r}`, span: "1" }));
  assert.equal(
    spansComparedText(spans),
    "rank0 / 1, rank1 / 1, rank2 / 1, rank3 / 1, rank4 / 1, rank5 / 1, rank6 / 1, rank7 / 1 and 1,016 more (1,024 in all)",
  );
  assert.equal(spansComparedText(spans.slice(0, 2)), "rank0 / 1, rank1 / 1");
});
