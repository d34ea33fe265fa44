"""CPU time of the reader's column building (``_Builder``) alone, on one trace.

Reads FILE serially once, keeping every decoded piece that reaches
``_Builder.add_events``; then builds the columns from those pieces REPEAT times into a
fresh builder (``add_events`` for every piece, then ``tables_out``/``memory_out``/
``flows_out``) and prints the CPU seconds (``time.process_time``) of each repeat, and
the serial ``read_trace`` CPU seconds. Run it with PYTHONPATH pointing at the
checkout to measure (old and new in alternation, from a folder outside both)::

    cd /tmp && PYTHONPATH=/path/to/checkout python bench_builder.py FILE [REPEAT]
"""

from __future__ import annotations

import gc
import sys
import time

from tb_kineto_insights.trace import reader


def main() -> None:
    path = sys.argv[1]
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    pieces: list[object] = []
    original = reader._Builder.add_events

    def keep(self: reader._Builder, events: list[object]) -> None:
        pieces.append(events)
        original(self, events)

    t = time.process_time()
    reader.read_trace(path, workers=1)
    read_s = time.process_time() - t
    reader._Builder.add_events = keep  # type: ignore[method-assign]
    reader.read_trace(path, workers=1)
    reader._Builder.add_events = original  # type: ignore[method-assign]
    exact = any(getattr(p, "ts", None) is not None for p in pieces)
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.process_time()
        b = reader._Builder(exact)
        for p in pieces:
            b.add_events(p)  # type: ignore[arg-type]
        b.tables_out()
        b.memory_out()
        b.flows_out()
        times.append(time.process_time() - t)
    print(
        f"{reader.__file__} read_cpu_s={read_s:.3f} "
        f"build_cpu_s={' '.join(f'{x:.3f}' for x in times)} min={min(times):.3f} "
        f"events={b.event_count}"
    )


if __name__ == "__main__":
    main()
