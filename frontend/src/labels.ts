// Names and definitions shown on the page: one place, so hover texts say the same
// thing everywhere (and match DESIGN.md's metric definitions).

export const BREAKDOWN_ORDER = [
  "kernel",
  "memcpy",
  "memset",
  "communication",
  "runtime",
  "data_loading",
  "cpu_exec",
  "other",
];

export const BREAKDOWN_LABELS: Record<string, string> = {
  kernel: "GPU kernels",
  memcpy: "Memcpy",
  memset: "Memset",
  communication: "Communication",
  runtime: "CUDA runtime",
  data_loading: "Data loading",
  cpu_exec: "CPU exec",
  other: "Other",
};

export const BREAKDOWN_DEFINITIONS: Record<string, string> = {
  kernel: "Time in compute kernels on any GPU (communication kernels excluded).",
  memcpy: "Time in GPU copies not already counted as kernel time.",
  memset: "Time in GPU memsets not already counted above.",
  communication: "NCCL/RCCL kernel time not hidden under compute, copies or memsets.",
  runtime: "CUDA/HIP runtime and driver calls (kernel launches, syncs) on any host thread, while no GPU work above runs.",
  data_loading: "enumerate(DataLoader) ranges while nothing above runs: the step waits for the next batch.",
  cpu_exec: "Any other CPU op or annotation while nothing above runs.",
  other: "The rest of the step window: nothing recorded.",
};

// Idle causes: generated from the host-activity cause table (src/vocabulary.ts).
export { IDLE_DEFINITIONS, IDLE_LABELS, IDLE_ORDER } from "./vocabulary";

export const SEVERITY_ORDER = ["high", "medium", "low", "info"];

// Diagnosis labels and definitions: generated from the rules (src/vocabulary.ts).
export { DIAGNOSIS_DEFINITIONS, DIAGNOSIS_NAMES } from "./vocabulary";

export const VERDICT_DEFINITIONS: Record<string, string> = {
  improved: "Better beyond the step-to-step noise (difference of means > 2 standard errors), and large enough to matter.",
  regressed: "Worse beyond the step-to-step noise (difference of means > 2 standard errors), and large enough to matter.",
  changed: "A setting (collectives /step, message or bucket size) that changed beyond noise: neither better nor worse by itself.",
  "within noise": "A difference, but not beyond the step-to-step noise.",
  negligible: "A change of at least 1 % of the base value, but under 0.5 % of the base step time (0.5 pp for shares): real for this row, too small to matter for the step.",
  unchanged: "Too small to matter: under 1 % of the base value.",
  "moved partly":
    "Moved, not faster: the op left the step's threads and appeared on another thread of the process (a prefetch thread, a thread pool; the note gives both places), or it shrank while the experiment's DataLoader moved into worker processes, which the profiler does not trace.",
  "not judged": "No verdict: the number includes waiting for other ranks, or the two sides measure it differently (see its note).",
  added: "Only in the experiment: a name the base does not run (e.g. Triton kernels after torch.compile). Not a regression by itself: compare the step time.",
  removed: "Only in the base: a name the experiment no longer runs. Not an improvement by itself: compare the step time.",
  "moved out":
    "Only in the base, and the experiment loads data in DataLoader worker processes, which the profiler does not trace: most likely the op now runs there (removed, or moved out of the traced threads).",
};

// Why a step window is not a steady-state step (summary.steps.left_out[].reason).
export const LEFT_OUT_LABELS: Record<string, string> = {
  gpu_backlog: "carries GPU work queued before the profiled range",
  warm_up: "a warm-up step",
  cut_off: "cut off when the profiler stopped",
};

// Definitions of metrics, by key (diagnosis evidence keys and summary fields).
// Each says what is measured and what the denominator is.
export const DEFINITIONS: Record<string, string> = {
  mean_step_us:
    "Mean step time over the steady-state steps (the ProfilerStep#N windows the profiler marked, less those left out). A step's time is its period on the resource that sets the pace: the host's when the GPU waits for it, the GPU's when the host runs ahead (the window runs from one step's start to the next's).",
  step_time:
    "The step's period on the resource that sets the pace: its window runs from the CPU ProfilerStep#N start (or the end of the previous step's GPU work, when the host runs ahead) to the end of the last GPU work launched inside it.",
  steady_state_steps:
    "The profiled steps every figure stands on. Left out, and named: a first step that carries GPU work queued before the profiler started (a host that runs ahead), a warm-up step (2x the others or more: compile, autotuning, lazy init), a last step cut off when the profiler stopped.",
  std_step_us: "Step-to-step standard deviation of the step time.",
  gpu_utilization_fraction:
    "GPU busy time (union of kernels, memcpy, memset) inside the step windows ÷ total step-window time.",
  short_count_fraction: "Kernels shorter than the short-kernel threshold ÷ all kernels that start in a step window.",
  short_time_fraction: "Time in short kernels ÷ time in all kernels that start in a step window (summed durations).",
  kernels_per_step: "Kernels that start in a step window ÷ number of steps.",
  launch_bound_fraction:
    "Kernels shorter than the runtime call that launched them ÷ kernels launched 1:1 by a runtime call found through their correlation id.",
  mean_launch_us: "Mean duration of the runtime calls (cudaLaunchKernel, …) that launched kernels, over the whole trace.",
  short_threshold_us: "A kernel shorter than this counts as short.",
  idle_fraction: "GPU idle time inside the step windows ÷ total step-window time.",
  idle_fraction_of_step_time: "Idle time with this cause ÷ total step-window time.",
  fraction_of_idle: "Idle time with this cause ÷ all idle time of the device inside the step windows.",
  fraction_of_step_time: "Idle time with this cause ÷ total step-window time.",
  idle_us: "GPU idle time inside the step windows, summed over steps.",
  idle_us_per_step: "GPU idle time inside the step windows ÷ number of steps.",
  gpu_busy_fraction: "GPU busy time inside the step windows ÷ total step-window time.",
  largest_gap_us: "The longest single idle gap inside a step window.",
  exposed_fraction: "Communication time not overlapped by compute on the same device ÷ total step-window time.",
  exposed_us_per_step: "Communication time not overlapped by compute ÷ number of steps.",
  comm_fraction: "Communication time (union of NCCL/RCCL kernels) ÷ total step-window time.",
  overlap_fraction: "Communication time overlapped by compute kernels on the same device ÷ communication time.",
  top_kind_time_us: "Kernel time of the collective kind with the most time, summed over the trace.",
  top_kind_busbw_gbps: "Bus bandwidth of that kind: algorithm bandwidth × nccl-tests factor (AllReduce 2(n−1)/n).",
  allreduce_median_bytes: "Median AllReduce message size.",
  threshold_fraction: "The diagnosis fires at this share of step time.",
  bytes_per_step: "Slope of step-end allocated memory over the steps (least squares).",
  r2: "How well a straight line fits the step-end allocated memory (r², 1 = perfect).",
  live_at_end_bytes: "Bytes allocated inside the profiled window and never freed before its end.",
  capacity_bytes: "Device memory (deviceProperties.totalGlobalMem).",
  steps_to_capacity: "Steps until the growth would fill the device memory.",
  cached_free_at_reserved_peak_fraction:
    "1 − allocated ÷ reserved, at the moment reserved memory peaks: the caching allocator's cache, not by itself fragmentation.",
  fragmentation_events:
    "Allocations (> 1 MiB) at which the allocator reserved a new segment although its cached free bytes (reserved − allocated) were at least the size requested; counted in the steady-state steps (every profiled step after the first that has any; the first may still be warming the cache up), as in the diagnosis.",
  peak_fraction_of_capacity: "Peak memory ÷ device memory (deviceProperties.totalGlobalMem).",
  last_fraction: "Matched collectives this rank arrived at last ÷ matched collectives it takes part in.",
  mean_lateness_us: "Lateness per collective: mean of (this rank's start − the earliest rank's start) over matched collectives.",
  mean_skew_when_last_us: "Skew per collective (latest − earliest start), mean over the collectives this rank arrived at last.",
  others_wait_us_per_step: "What the other ranks waited for this rank in collectives, per step (/step): the hidden part plus the exposed part.",
  others_hidden_wait_us_per_step: "Of the others' wait for this rank, the part their own compute kernels ran under (no step time lost), per step.",
  others_exposed_wait_us_per_step: "Of the others' wait for this rank, the part no compute hid: it lengthens their step, per step.",
  lateness_excess_us_per_step: "Mean per-step lateness of this rank minus the other ranks' mean (lateness of a step: how far behind the first rank it arrived at the step's collective where it was furthest behind).",
  lateness_noise_us: "The noise the mean lateness is judged against: the step-to-step spread of lateness once rank and step effects are taken out (residual standard deviation of ranks × steps), pooled with the reference spread of balanced ranks (a share of the step, measured on balanced H200 runs).",
  lateness_min_excess_us: "This rank's smallest per-step excess lateness over the other ranks' mean: late by at least this much in every tested step (judged against the reference spread of balanced ranks).",
  cause: "Why it is late: the class of time where this rank exceeds the median of the other ranks most, measured on what each rank did between its previous collective and the collectives this rank is late to (or over whole steps when those are not known).",
  cause_us_per_step: "How much more of that time this rank spends per step than the median rank, in the time before the collectives it is late to.",
  cause_straggler_us_per_step: "That time on this rank, per step.",
  cause_median_rank_us_per_step: "That time on the median of the other ranks, per step.",
  cause_share_of_delay: "The excess ÷ the delay this rank causes the others (its cost): how much of its lateness the cause explains.",
  cause_basis: "What the ranks were compared on: the time between each rank's previous collective and the collectives this rank is late to (one per step), or whole steps.",
  cause_launches_per_step_excess: "Compute kernels this rank starts per step beyond the median rank, in the same time.",
  cause_classes: "Every class's excess over the median rank, per step (negative: less than the median rank).",
  cause_top: "The kernels (GPU compute) or CPU ops this rank spends the most more time in than the median rank, per step over whole steps.",
  cause_frames: "With Python stacks: the user frames where this rank's host spends more of the cause's time than the median rank's, per step.",
  delay_us_per_step: "What the other ranks lose to this rank per step (/step): how much earlier all of them could start without it (its latest arrival − the next latest), median over steps.",
  share_of_step: "delay_us_per_step ÷ mean step time.",
  p_value: "Chance of a lateness this consistent if no rank were late: the better of the mean-excess t-test and the every-step test, × 2, × the ranks (Bonferroni); consistent at 0.01 or less.",
  skew_median_us: "Skew per collective (latest − earliest start of the same collective across ranks), median.",
  wait_us: "Waited, total: this rank's (latest start − its start) summed over matched collectives of the whole profile.",
  mean_wait_us: "Waited per collective: (latest start − this rank's start), mean over matched collectives.",
  wait_us_per_step: "Waited /step: this rank's (latest start − its start) summed over the matched collectives of a step.",
  transfer_us_per_step: "Transfer /step: (earliest end − latest start) of the matched collectives of a step, summed.",
  exposed_wait_us_per_step: "Exposed waited /step: the part of the waiting not hidden under compute kernels.",
  exposed_transfer_us_per_step: "Exposed transfer /step: the part of the transfer not hidden under compute kernels.",
  time_us: "Summed duration.",
  count: "Number of events.",
  impact_fraction: "The share of the steady step its fix would save: the step's graph replayed with the fix applied (see the prediction), or the rule's estimate where no replay exists.",
};


// The classes of the critical path (summary.critical_path.by_class_us and the
// timeline's critical-path lane, ``path:<class>``; ``host``: a run of host events).
export const PATH_CLASS_LABELS: Record<string, string> = {
  compute: "GPU compute",
  communication: "Communication",
  copy: "Copies (memcpy, memset)",
  dependency: "Waiting for another stream",
  launch: "Launch overhead",
  sync: "Sync calls",
  allocator: "cudaMalloc / cudaFree",
  runtime: "Other runtime calls",
  data_loading: "DataLoader",
  optimizer: "Optimizer step (host)",
  cpu_ops: "CPU ops (host)",
  untraced: "Host, untraced (Python)",
  host: "Host (the launching thread)",
};
