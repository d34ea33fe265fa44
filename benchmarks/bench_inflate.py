"""Inflate one ``.gz`` trace with the stdlib's zlib and with zlib-ng, as
``trace/source.py`` does (64 KiB of input per call, at most 1 MiB of output), rounds
alternated; prints min / median CPU seconds (process time) of each.

Usage: python benchmarks/bench_inflate.py TRACE.json.gz [rounds]
"""

from __future__ import annotations

import sys
import time
import zlib
from types import ModuleType

from tb_kineto_insights.trace.source import BLOCK_BYTES, INFLATE_STEP_BYTES


def inflate(module: ModuleType, data: bytes) -> int:
    """Total uncompressed bytes of the first gzip member of ``data``."""
    inflater = module.decompressobj(wbits=31)
    total, pos, pending = 0, 0, b""
    while not inflater.eof:
        if not pending:
            pending, pos = data[pos : pos + BLOCK_BYTES], pos + BLOCK_BYTES
            if not pending:
                break
        piece, later = pending[:INFLATE_STEP_BYTES], pending[INFLATE_STEP_BYTES:]
        total += len(inflater.decompress(piece, BLOCK_BYTES))
        pending = inflater.unconsumed_tail + later
    return total


def main() -> None:
    from zlib_ng import zlib_ng

    with open(sys.argv[1], "rb") as fh:
        data = fh.read()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    times: dict[str, list[float]] = {"zlib": [], "zlib_ng": []}
    sizes = set()
    for _ in range(rounds):
        for name, module in (("zlib", zlib), ("zlib_ng", zlib_ng)):
            t = time.process_time()
            sizes.add(inflate(module, data))
            times[name].append(time.process_time() - t)
    assert len(sizes) == 1, sizes
    for name, values in times.items():
        values.sort()
        print(
            f"{name}: {max(sizes)} bytes, "
            f"min {values[0]:.3f} s, median {values[len(values) // 2]:.3f} s"
        )


if __name__ == "__main__":
    main()
