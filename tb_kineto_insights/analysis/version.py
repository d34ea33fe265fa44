"""The version of what a summary contains, in a module of its own so that code that only
names it (the cache's folder ``v<ANALYSIS_VERSION>``, ``history`` reading headline
records) need not import the analysis itself (``summary.py`` re-exports it)."""

#: Bumped whenever a summary's content changes, so cached summaries are recomputed.
#: 8: ``steps.origin_ns`` (the first step on the trace's clock, for ``history``).
#: 9: ``steps.origin_ns`` and issue 35's Python frames (both made version 8 apart).
#: 10: issues 26-31 merged (efficiency, timeline, straggler cause, new verdicts, history).
#: 11: issue 32 (schema-checked summaries, numbers that overflowed) merged with them.
#: 12: issue 35's frames in the timeline (``python_frames`` lanes) and straggler cause.
#: 13: issue 28's timeline store packed smaller (byte-planed columns, gap-coded starts,
#: names once per store).
#: 14: the timeline classes cudaMalloc/cudaFree as allocator, as the idle band does.
#: 15: headlines leave out steps of no length (no step time for an empty trace).
#: 16: a file cut in its first step's GPU events sets them aside
#: (``lost.gpu_events_set_aside``); a cut's steps are judged per launching thread's block;
#: ``tables.ops_elsewhere`` (CPU ops off the step's threads, for "moved partly").
#: 17: per-step matmul/conv/attention work (diff efficiency verdicts), the trace's ``flops`` arg,
#: the reachable roof per kind (conv 0.30, attention 0.28).
#: 18: a cut gzip file's end given as its compressed size and the inflated JSON offset.
#: 19: straggler cause on the lead-ups to the late collectives (``communication.sequence``
#: lead-ups), reference noise in the lateness test.
#: 20: one headline index per log directory in the cache (store/headline_index.py).
#: 21: issue 28: ``Diagnosis.moment``; the timeline store's host lanes to 100 ns and
#: the ops' input shapes (``PackedLane.quantum_ns``, a ``shape`` column).
#: 22: run-level diagnoses in the history and the view across runs (``where`` on a
#: headline diagnosis; the headline index keeps each multi-worker run's, format 2).
#: 23: JSON with no event object is no trace (an error, not a run); a whole gzip of cut
#: JSON says its JSON ends early (``trace_data_loss`` title).
#: 24: a headline of a file cut in or before its GPU events has no step time,
#: utilization or breakdown (a cut entered a history as a regression).
ANALYSIS_VERSION = 24
