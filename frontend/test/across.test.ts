import assert from "node:assert/strict";
import { test } from "node:test";

import { pageText } from "../src/panels/across";
import type { AcrossRunsPage } from "../src/types";
import { partial } from "./fixture";

function page(extra: Partial<AcrossRunsPage>): AcrossRunsPage {
  return partial<AcrossRunsPage>({ query: "", total: 2000, matched: 2000, offset: 0, limit: 50, loading: 0, rows: [], ...extra });
}

test("the view across runs says which rows it shows, of how many", () => {
  const rows = new Array(50).fill({});
  assert.equal(pageText(page({ rows })), "Runs 1–50 of 2,000 runs, worst first.");
  assert.equal(pageText(page({ rows: rows.slice(0, 7), offset: 1950, matched: 1957 })), "Runs 1,951–1,957 of 1,957 matching runs (of 2,000), worst first.");
  assert.equal(pageText(page({ query: "leak", matched: 0 })), "No run matches “leak” (of 2,000 runs).");
  assert.equal(pageText(page({ total: 0, matched: 0 })), "No runs.");
});
