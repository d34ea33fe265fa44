// Shapes of the JSON the plugin serves (docs/api.md). Every field is optional or
// nullable on purpose: the page must survive old caches, partial summaries and damaged
// traces, so the code that reads these checks before it uses.

export type Num = number | null | undefined;

export interface SpanEntry {
  span: string;
  size_bytes?: Num;
  mtime?: Num;
  state?: string; // queued | loading | ready | error | not_loaded
  error?: string | null;
  progress?: LoadProgress | null;
}

export interface LoadProgress {
  elapsed_s?: Num;
  estimated_fraction?: Num;
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
}

export interface Diagnosis {
  id: string;
  severity: string; // high | medium | low | info
  title: string;
  evidence?: Record<string, unknown>;
  recommendation?: string;
  panel?: string;
  impact_fraction?: Num;
}

export type Breakdown = Record<string, Num>;

export interface StepRow {
  number: number;
  start_us?: Num;
  duration_us?: Num;
  cpu_duration_us?: Num;
  breakdown_us?: Breakdown;
  gpu_utilization_fraction?: Num;
}

export interface StepsPanel {
  count?: number;
  has_markers?: boolean;
  mean_step_us?: Num;
  std_step_us?: Num;
  min_step_us?: Num;
  max_step_us?: Num;
  cv?: Num;
  total_us?: Num;
  breakdown_order?: string[];
  mean_breakdown_us?: Breakdown;
  gpu_utilization_fraction?: Num;
  main_device?: number | string | null;
  devices?: { device: number | string; busy_us?: Num; gpu_utilization_fraction?: Num }[];
  steps?: StepRow[];
}

export interface HistogramBin {
  lo_us: number;
  hi_us: number | null;
  count: number;
  time_us?: Num;
}

export interface KernelRow {
  name: string;
  full_name?: string;
  count?: Num;
  time_us?: Num;
  mean_us?: Num;
  short_fraction?: Num;
  is_communication?: boolean;
}

export interface FusionCandidate {
  kernels: string[];
  length?: Num;
  truncated?: boolean;
  occurrences?: Num;
  per_step?: Num;
  total_time_us?: Num;
  cpu_op?: string | null;
}

export interface KernelsPanel {
  count?: Num;
  count_in_steps?: Num;
  outside_steps?: { count?: Num; time_us?: Num };
  per_step?: { number: number; count?: Num; time_us?: Num; short_count?: Num }[];
  mean_per_step?: Num;
  short_threshold_us?: Num;
  short_count_fraction?: Num;
  short_time_fraction?: Num;
  graph_launched_count?: Num;
  duration_histogram?: HistogramBin[];
  launch?: {
    mean_launch_us?: Num;
    launch_count?: Num;
    one_to_one_count?: Num;
    launch_bound_count?: Num;
    launch_bound_fraction?: Num;
    launch_bound_denominator?: string;
    unlinked_kernels?: Num;
  };
  top_by_count?: KernelRow[];
  top_by_time?: KernelRow[];
  fusion_candidates?: FusionCandidate[];
  notes?: string[];
}

export interface IdleCause {
  us?: Num;
  fraction_of_idle?: Num;
  fraction_of_step_time?: Num;
}

export interface IdleGap {
  step?: Num;
  offset_us?: Num;
  start_us?: Num;
  length_us?: Num;
  cause?: string;
  opened_by_sync?: boolean;
  causes_us?: Record<string, Num>;
  op?: string | null;
  innermost_op?: string | null;
  thread?: { pid?: unknown; tid?: unknown } | null;
}

export interface IdleDevice {
  device: number | string;
  busy_us?: Num;
  busy_fraction?: Num;
  idle_us?: Num;
  idle_fraction?: Num;
  idle_us_per_step?: Num;
  gap_count?: Num;
  causes?: Record<string, IdleCause>;
  sync_opened_gaps?: Num;
  per_step?: { number: number; idle_us?: Num; busy_fraction?: Num; causes_us?: Record<string, Num> }[];
  gap_histogram?: HistogramBin[];
  largest_gaps?: IdleGap[];
}

export interface IdlePanel {
  cause_order?: string[];
  main_device?: number | string | null;
  devices?: IdleDevice[];
  notes?: string[];
}

export interface CommKind {
  kind: string;
  count?: Num;
  kernel_count?: Num;
  bytes?: Num;
  out_bytes?: Num;
  sized_count?: Num;
  time_us?: Num;
  mean_us?: Num;
  algbw_gbps?: Num;
  busbw_gbps?: Num;
  // "least_wait_estimate" (a lone rank), "matched_transfer" (run view); absent: kernel time
  busbw_basis?: string;
  calls_per_step?: Num;
  median_bytes?: Num;
  group_sizes?: number[];
}

export interface CommStep {
  number: number;
  comm_us?: Num;
  overlapped_us?: Num;
  exposed_us?: Num;
  comm_fraction?: Num;
  exposed_fraction?: Num;
}

export interface CommunicationPanel {
  has_collectives?: boolean;
  kernel_count?: Num;
  collective_count?: Num;
  world_size?: Num;
  steps?: CommStep[];
  total_step_us?: Num;
  comm_us?: Num;
  overlapped_us?: Num;
  exposed_us?: Num;
  comm_fraction?: Num;
  exposed_fraction?: Num;
  overlap_fraction?: Num;
  mean_comm_us?: Num;
  mean_overlapped_us?: Num;
  mean_exposed_us?: Num;
  kinds?: CommKind[];
  ddp_bucket_bytes?: {
    count?: Num;
    total_bytes?: Num;
    min_bytes?: Num;
    median_bytes?: Num;
    max_bytes?: Num;
    distinct_count?: Num;
  };
  notes?: string[];
}

export interface MemorySeries {
  t_us: number[];
  bytes: number[];
}

export interface MemoryDevice {
  device: string;
  device_type?: Num;
  device_type_name?: string;
  device_id?: Num;
  event_count?: Num;
  allocation_count?: Num;
  free_count?: Num;
  has_totals?: boolean;
  series?: { allocated?: MemorySeries | null; reserved?: MemorySeries | null; points_in?: Num };
  per_step?: {
    number: number;
    start_bytes?: Num;
    peak_bytes?: Num;
    end_bytes?: Num;
    peak_reserved_bytes?: Num;
    events?: Num;
  }[];
  growth?: { bytes_per_step?: Num; r2?: Num; steps_used?: Num; steady?: boolean; total_bytes?: Num };
  peak_allocated_bytes?: Num;
  peak_allocated_us?: Num;
  peak_reserved_bytes?: Num;
  peak_reserved_us?: Num;
  cached_free_at_reserved_peak_fraction?: Num;
  fragmentation?: {
    events?: Num;
    requested_bytes?: Num;
    min_cached_free_before_bytes?: Num;
    steady_state_steps?: number[];
    reserved_growth_bytes_per_step?: Num;
    allocated_peak_growth_bytes_per_step?: Num;
    excess_reserved_growth_bytes_per_step?: Num;
  } | null;
  capacity_bytes?: Num;
  peak_fraction_of_capacity?: Num;
  peak_basis?: string;
  live_at_end?: {
    count?: Num;
    bytes?: Num;
    by_op?: { op?: string | null; input_shapes?: string | null; count?: Num; bytes?: Num; steps?: number[] }[];
    groups?: Num;
  };
  largest_allocations?: {
    bytes?: Num;
    op?: string | null;
    input_shapes?: string | null;
    step?: Num;
    t_us?: Num;
    freed?: boolean;
    lifetime_us?: Num;
  }[];
  notes?: string[];
}

export interface MemoryPanel {
  devices?: MemoryDevice[];
  main_device?: string | null;
  notes?: string[];
}

export interface HealthPanel {
  path?: string;
  compressed?: boolean;
  file_bytes?: Num;
  json_bytes?: Num;
  root?: string;
  event_count?: Num;
  category_counts?: Record<string, Num>;
  kind_counts?: Record<string, Num>;
  skipped?: Record<string, Num>;
  quarantined?: Record<string, Num>;
  repairs?: Record<string, Num>;
  exact_ns_timestamps?: boolean;
  kineto_log?: string[];
  kineto_record_counts?: Record<string, Num>;
  flags?: Record<string, boolean>;
  device_properties?: Record<string, unknown>[];
  distributed_info?: Record<string, unknown> | null;
  metadata?: Record<string, unknown>;
}

export interface Summary {
  diagnoses?: Diagnosis[];
  steps?: StepsPanel;
  kernels?: KernelsPanel;
  idle?: IdlePanel;
  communication?: CommunicationPanel;
  memory?: MemoryPanel;
  health?: HealthPanel;
}

export interface RankRow {
  rank: number;
  worker: string;
  step_count?: Num;
  mean_step_us?: Num;
  mean_comm_us?: Num;
  mean_exposed_us?: Num;
  exposed_fraction?: Num;
  collective_count?: Num;
  matched_count?: Num;
  last_count?: Num;
  last_fraction?: Num;
  wait_us?: Num;
  mean_wait_us?: Num;
  mean_lateness_us?: Num;
  // newer run view (issue 11): totals and per-collective values named by their unit
  wait_us_total?: Num;
  wait_us_per_collective?: Num;
  lateness_us_per_collective?: Num;
  wait_us_per_step?: Num;
  transfer_us_per_step?: Num;
  exposed_wait_us_per_step?: Num;
  exposed_transfer_us_per_step?: Num;
  delay_caused_us_per_step?: Num;
}

// Per collective kind across ranks, bandwidth from the matched transfer.
export interface RunKind {
  kind: string;
  matched_count?: Num;
  calls_per_step?: Num;
  median_bytes?: Num;
  median_transfer_us?: Num;
  algbw_gbps?: Num;
  busbw_gbps?: Num;
  busbw_basis?: string;
}

export interface RunView {
  worker_count?: Num;
  world_size?: Num;
  rank_source?: string;
  ranks?: RankRow[];
  kinds?: RunKind[];
  matched_count?: Num;
  unmatched_count?: Num;
  skew_us?: { count?: Num; mean_us?: Num; median_us?: Num; p90_us?: Num; max_us?: Num; total_us?: Num };
  largest_skews?: {
    pg?: string;
    kind?: string;
    step?: Num;
    seq?: Num;
    skew_us?: Num;
    last_rank?: Num;
    start_offsets_us?: Record<string, Num>;
    // ranks of the group left out of start_offsets_us (only the latest and earliest listed)
    ranks_not_listed?: Num;
  }[];
  steps?: { number: number; durations_us?: Record<string, Num>; spread_us?: Num }[];
  straggler?: {
    rank?: Num;
    worker?: string;
    last_count?: Num;
    matched_count?: Num;
    last_fraction?: Num;
    mean_lateness_us?: Num;
    p_value?: Num;
    delay_us_per_step?: Num;
    share_of_step?: Num;
  } | null;
  notes?: string[];
  diagnoses?: Diagnosis[];
  superseded_span_diagnoses?: { worker: string; rank?: Num; id: string }[];
}

export interface RunSummaryAnswer {
  run: string;
  span_index?: number;
  spans?: { worker: string; span: string }[];
  errors?: Record<string, string>;
  summary?: RunView | null;
}

export interface DiffJudgement {
  base?: Num;
  exp?: Num;
  delta?: Num;
  change_fraction?: Num;
  base_noise?: Num;
  exp_noise?: Num;
  stderr?: Num;
  base_n?: Num;
  exp_n?: Num;
  min_delta?: Num;
  verdict?: string;
}

export interface DiffMetric extends DiffJudgement {
  key: string;
  label: string;
  unit: string;
  better?: string;
  basis?: { base?: string; exp?: string };
  note?: string;
  // rows across ranks: rank → value, each side (the mean hides which rank waits)
  by_rank?: { base?: Record<string, Num>; exp?: Record<string, Num> };
}

export interface DiffNameRow {
  name: string;
  time_us_per_step?: DiffJudgement;
  count_per_step?: DiffJudgement;
  delta_time_us_per_step?: Num;
  status?: string;
  note?: string;
}

export interface DiffBuckets {
  count?: Num;
  count_per_step?: Num;
  median_bytes?: Num;
  min_bytes?: Num;
  max_bytes?: Num;
  distinct_count?: Num;
  sizes?: { bytes: number; count: number }[];
}

export interface DiffFound {
  id: string;
  scope?: string;
  where?: string;
  severity?: string;
  title?: string;
  impact_fraction?: Num;
}

export interface DiffTable {
  changed?: DiffNameRow[];
  added?: DiffNameRow[];
  removed?: DiffNameRow[];
  // NCCL/RCCL kernels: time includes waiting for other ranks, not judged
  communication?: DiffNameRow[];
  unchanged_count?: Num;
}

export interface DiffComparability {
  field: string;
  base: unknown;
  new: unknown;
  why: string;
  source?: string;
}

export interface DiffDoc {
  schema?: string;
  base?: { label?: string; workers?: string[] };
  exp?: { label?: string; workers?: string[] };
  headline?: {
    base_step_us?: Num;
    exp_step_us?: Num;
    speedup?: Num;
    change_fraction?: Num;
    verdict?: string;
  };
  warnings?: string[];
  // unlike-for-like recording differences (analysis/comparability.py)
  comparability?: DiffComparability[];
  metrics?: DiffMetric[];
  kernels?: DiffTable;
  ops?: DiffTable;
  diagnoses?: {
    appeared?: string[];
    disappeared?: string[];
    kept?: string[];
    found?: { base?: DiffFound[]; exp?: DiffFound[] };
  };
  communication?: {
    ddp_buckets?: { base?: DiffBuckets | null; exp?: DiffBuckets | null };
    busbw_basis?: Record<string, { base?: string; exp?: string }>;
    rank_rows_from?: string;
  };
  per_rank?: Record<string, unknown>[];
  largest_changes?: { what?: string; name?: string; delta_us_per_step?: Num; verdict?: string }[];
  noise_rule?: string;
}

// A 202 answer: the span (or the spans of a side) is still being read.
export interface PendingAnswer {
  state?: string;
  error?: string | null;
  progress?: LoadProgress | null;
  pending?: (SpanEntry & { worker?: string; run?: string })[];
  total?: Num;
}
