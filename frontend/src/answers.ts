// Shapes of the plugin's HTTP answers around the documents (docs/api.md): /runs, the
// 202 "still loading" answers and /run_summary's envelope. The documents themselves
// (Summary, RunView, DiffDocument) are typed by ./types.ts, generated from the JSON
// Schema (docs/schema/); these answers are plugin plumbing, not part of that schema.

import type { RunView } from "./types";

export type Num = number | null | undefined;

export interface LoadProgress {
  elapsed_s?: Num;
  estimated_fraction?: Num;
}

export interface SpanEntry {
  span: string;
  size_bytes?: Num;
  mtime?: Num;
  state?: string; // queued | loading | ready | error | not_loaded
  error?: string | null;
  progress?: LoadProgress | null;
}

export interface WorkerEntry {
  worker: string;
  spans: SpanEntry[];
}

export interface RunEntry {
  run: string;
  label?: string; // run ".": the log directory's own folder name
  workers: WorkerEntry[];
}

export interface RunsAnswer {
  runs?: RunEntry[];
  error?: string | null;
  scanning?: boolean;
  perfetto_url?: string; // where "Open in Perfetto" sends a step's window
  logdirs?: string[]; // the log directories served (named on the empty page)
  watched?: boolean; // local folders watched for new files (else rescanned)
}

export interface RunSummaryAnswer {
  run: string;
  span_index?: number;
  spans?: { worker: string; span: string }[];
  errors?: Record<string, string>;
  summary?: RunView | null;
}

// A 202 answer: the span (or the spans of a side) is still being read.
export interface PendingAnswer {
  state?: string;
  error?: string | null;
  progress?: LoadProgress | null;
  pending?: (SpanEntry & { worker?: string; run?: string })[];
  total?: Num;
}
