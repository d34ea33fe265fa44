"""Collectives: which kernels and ops are communication, of what kind, how many bytes
per element, and the nccl-tests bus-bandwidth factors.

This is the one classifier of communication in the package (``names.
is_communication_kernel`` should delegate to :func:`is_communication_kernel`).

Kinds (:data:`KINDS`): ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``,
``reduce``, ``all_to_all``, ``send_recv``, ``barrier``, and ``other_collective`` for a
recognised NCCL/RCCL kernel or collective op whose kind the name does not say
(``ncclDevKernel_Generic_4``, ``rcclGenericKernel``, ``gather``, ``scatter``).

Sources, strongest first:

- the ``Collective name`` argument Kineto writes on NCCL kernels and
  ``record_param_comms`` ops (``allreduce``, ``all_gather_into_tensor``,
  ``_reduce_scatter_base``, ``alltoall_base``, ``send``, ``recv``, ``barrier``, …);
- op names of the c10d layers: ``nccl:all_reduce``, ``gloo:broadcast``,
  ``c10d::allreduce_``, ``c10d::_allgather_base_``;
- kernel names: NCCL ``ncclKernel_AllReduce_RING_LL_Sum_float(...)``, NCCL ≥ 2.19
  ``ncclDevKernel_AllGather_RING_LL(...)`` / ``ncclDevKernel_SendRecv(...)`` /
  ``ncclDevKernel_Generic_4(...)``, NCCL < 2.8 ``ncclAllReduceRingLLKernel_sum_f32``,
  RCCL ``rcclGenericKernel<1, false>(...)``, with or without a leading ``void`` and in
  any letter case.
"""

from __future__ import annotations

import re
from functools import lru_cache

ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
BROADCAST = "broadcast"
REDUCE = "reduce"
ALL_TO_ALL = "all_to_all"
SEND_RECV = "send_recv"
BARRIER = "barrier"
OTHER_COLLECTIVE = "other_collective"

#: Every kind :func:`collective_kind` returns, in display order.
KINDS: tuple[str, ...] = (
    ALL_REDUCE,
    ALL_GATHER,
    REDUCE_SCATTER,
    BROADCAST,
    REDUCE,
    ALL_TO_ALL,
    SEND_RECV,
    BARRIER,
    OTHER_COLLECTIVE,
)

#: A communication kernel: NCCL or RCCL, any generation, optionally after ``void``.
_COMM_KERNEL = re.compile(r"^\s*(?:void\s+)?(?:nccl|rccl)", re.IGNORECASE)
#: Op names of the c10d layers: prefix → whether an unknown remainder is still a
#: collective (``nccl:foo`` is; ``c10d::foo`` may be bookkeeping such as ``c10d::wait``).
_OP_PREFIXES: tuple[tuple[str, bool], ...] = (
    ("nccl:", True),
    ("rccl:", True),
    ("gloo:", True),
    ("ucc:", True),
    ("mpi:", True),
    ("xccl:", True),
    ("c10d::", False),
)
#: Keywords in a kernel name (lower case, underscores removed), first match wins:
#: compound names before their parts (``allreduce`` before ``reduce``).
_KERNEL_KEYWORDS: tuple[tuple[str, str], ...] = (
    ("allreduce", ALL_REDUCE),
    ("reducescatter", REDUCE_SCATTER),
    ("allgather", ALL_GATHER),
    ("alltoall", ALL_TO_ALL),
    ("sendrecv", SEND_RECV),
    ("broadcast", BROADCAST),
    ("send", SEND_RECV),
    ("recv", SEND_RECV),
    ("reduce", REDUCE),
)
#: Collective names (lower case, underscores removed, suffixes stripped) → kind;
#: ``None``: not a collective (``wait`` is ``work.wait()``).
_COLLECTIVE_NAMES: dict[str, str | None] = {
    "allreduce": ALL_REDUCE,
    "allgather": ALL_GATHER,
    "reducescatter": REDUCE_SCATTER,
    "broadcast": BROADCAST,
    "reduce": REDUCE,
    "alltoall": ALL_TO_ALL,
    "alltoallv": ALL_TO_ALL,
    "send": SEND_RECV,
    "recv": SEND_RECV,
    "isend": SEND_RECV,
    "irecv": SEND_RECV,
    "sendrecv": SEND_RECV,
    "recvanysource": SEND_RECV,
    "batchisendirecv": SEND_RECV,
    "p2p": SEND_RECV,
    "barrier": BARRIER,
    "monitoredbarrier": BARRIER,
    "gather": OTHER_COLLECTIVE,
    "scatter": OTHER_COLLECTIVE,
    "wait": None,
    "waitall": None,
}
_NAME_SUFFIXES: tuple[str, ...] = ("_coalesced", "_base", "_into_tensor", "_tensor", "_single")


def is_communication_kernel(name: str) -> bool:
    """An NCCL/RCCL collective or point-to-point kernel (``ncclKernel_*``,
    ``ncclDevKernel_*``, ``rcclGenericKernel``, lower-case variants, ``void`` prefix)."""
    return bool(_COMM_KERNEL.match(name))


def _normalise_collective_name(name: str) -> str:
    text = name.strip().lower().strip("_")
    changed = True
    while changed:
        changed = False
        for suffix in _NAME_SUFFIXES:
            if text.endswith(suffix) and len(text) > len(suffix):
                text = text[: -len(suffix)].strip("_")
                changed = True
    return text.replace("_", "").replace(" ", "")


def _kind_from_collective_name(name: str) -> tuple[bool, str | None]:
    """(known, kind) for a ``Collective name`` value; unknown names are not decided."""
    key = _normalise_collective_name(name)
    if key in _COLLECTIVE_NAMES:
        return True, _COLLECTIVE_NAMES[key]
    return False, None


def _kind_from_kernel_name(name: str) -> str:
    text = re.sub(r"^\s*void\s+", "", name)
    cut = min((i for i in (text.find("("), text.find("<")) if i >= 0), default=len(text))
    token = text[:cut].lower().replace("_", "")
    for keyword, kind in _KERNEL_KEYWORDS:
        if keyword in token:
            return kind
    return OTHER_COLLECTIVE


def _kind_from_op_name(name: str) -> tuple[bool, str | None]:
    lowered = name.strip().lower()
    for prefix, always in _OP_PREFIXES:
        if lowered.startswith(prefix):
            known, kind = _kind_from_collective_name(lowered[len(prefix) :])
            if known:
                return True, kind
            return True, OTHER_COLLECTIVE if always else None
    return False, None


@lru_cache(maxsize=65536)
def collective_kind(kernel_or_op_name: str, collective_name: str | None = None) -> str | None:
    """The collective kind of a kernel or op, or ``None`` for non-communication.

    ``collective_name`` (the ``Collective name`` argument) wins when present and known;
    ``wait`` (``work.wait()``) is not a collective. Otherwise the name decides: an
    ``nccl:*``/``gloo:*``/``c10d::*`` op name, else an NCCL/RCCL kernel name (a
    recognised kernel whose kind the name does not say is ``other_collective``).
    """
    if collective_name:
        known, kind = _kind_from_collective_name(collective_name)
        if known:
            return kind
    if is_communication_kernel(kernel_or_op_name):
        return _kind_from_kernel_name(kernel_or_op_name)
    known, kind = _kind_from_op_name(kernel_or_op_name)
    if known:
        return kind
    if collective_name:  # an unknown name on an op that carries collective args
        return OTHER_COLLECTIVE
    return None


#: Bytes per element by dtype as Kineto writes it: c10 ``ScalarType`` names in the
#: ``dtype`` argument (``Float``, ``BFloat16``), C++ names in ``Input type``
#: (``float``, ``c10::Half``, ``signed char``) and torch names (``torch.float32``).
_DTYPE_BYTES: dict[str, int] = {
    # c10::ScalarType names
    "byte": 1,
    "char": 1,
    "short": 2,
    "int": 4,
    "long": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "complexhalf": 4,
    "complexfloat": 8,
    "complexdouble": 16,
    "bool": 1,
    "qint8": 1,
    "quint8": 1,
    "qint32": 4,
    "bfloat16": 2,
    "quint4x2": 1,
    "quint2x4": 1,
    "bits1x8": 1,
    "bits2x4": 1,
    "bits4x2": 1,
    "bits8": 1,
    "bits16": 2,
    "float8e5m2": 1,
    "float8e4m3fn": 1,
    "float8e5m2fnuz": 1,
    "float8e4m3fnuz": 1,
    "float8e8m0fnu": 1,
    "float4e2m1fnx2": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "int1": 1,
    "int2": 1,
    "int3": 1,
    "int4": 1,
    "int5": 1,
    "int6": 1,
    "int7": 1,
    "uint1": 1,
    "uint2": 1,
    "uint3": 1,
    "uint4": 1,
    "uint5": 1,
    "uint6": 1,
    "uint7": 1,
    # torch / numpy style
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
    "f16": 2,
    "f32": 4,
    "f64": 8,
    "bf16": 2,
    "i8": 1,
    "u8": 1,
    "i32": 4,
    "i64": 8,
    # C++ spellings in `Input type`
    "signedchar": 1,
    "unsignedchar": 1,
    "longint": 8,
    "longlong": 8,
    "longlongint": 8,
    "unsignedint": 4,
    "unsignedlong": 8,
    "unsignedshort": 2,
    "shortint": 2,
}


@lru_cache(maxsize=1024)
def dtype_size_bytes(dtype: str) -> int | None:
    """Bytes per element of a dtype as the trace spells it, or ``None`` if unknown.

    ``Float`` 4, ``Half``/``BFloat16`` 2, ``Double``/``Long`` 8, ``Int`` 4,
    ``Byte``/``Char``/``Bool`` 1, ``Float8_*`` 1, ``ComplexFloat`` 8; also
    ``torch.bfloat16``, ``c10::Half``, ``signed char``, ``long int``.
    """
    text = dtype.strip().lower()
    for prefix in ("torch.", "c10::", "at::", "std::"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    if text.endswith("_t"):  # int8_t, uint64_t
        text = text[:-2]
    key = re.sub(r"[\s_]", "", text)
    return _DTYPE_BYTES.get(key)


def bus_bandwidth_factor(kind: str, n: int | None) -> float | None:
    """Bus bandwidth / algorithm bandwidth for a collective over ``n`` ranks.

    The factors of nccl-tests (NVIDIA/nccl-tests, ``doc/PERFORMANCE.md``, "Bus
    bandwidth"): the bandwidth each rank's busiest link must sustain, comparable to the
    hardware peak whatever the number of ranks.

    - AllReduce: ``2 (n − 1) / n``;
    - AllGather, ReduceScatter: ``(n − 1) / n`` (algorithm bandwidth from the full
      gathered / scattered size); AllToAll: ``(n − 1) / n`` (nccl-tests' alltoall test);
    - Broadcast, Reduce: ``1``; send/recv: ``1``.

    ``None`` for barriers, unknown kinds, and a missing or non-positive ``n``.
    """
    if n is None or n < 1:
        return None
    if kind == ALL_REDUCE:
        return 2.0 * (n - 1) / n
    if kind in (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL):
        return (n - 1) / n
    if kind in (BROADCAST, REDUCE, SEND_RECV):
        return 1.0
    return None
