"""Where an event goes, by its phase and category: a duration kind's table, flows,
instants, metadata, or a count of what was skipped.

Every ``(phase, category)`` pair has exactly one route (:func:`route_of`): complete
events (``X``) go to the table of their category's kind (:func:`kind_of_category`;
``missing_cat`` without a category), flow phases (``s`` ``f`` ``t``) to ``flow``,
instants (``i`` ``I``) to ``instant``, metadata (``M``) to ``metadata``, an event
without a phase to ``missing_ph`` and any other phase to ``unsupported``.
"""

from __future__ import annotations

from tb_kineto_insights.trace import model as m

#: Category (as written by any Kineto version) → reader kind.
CATEGORY_KIND: dict[str, str] = {
    "kernel": m.KERNEL,
    "gpu_memcpy": m.MEMCPY,
    "memcpy": m.MEMCPY,
    "gpu_memset": m.MEMSET,
    "memset": m.MEMSET,
    "cuda_runtime": m.RUNTIME,
    "cuda_driver": m.RUNTIME,
    "runtime": m.RUNTIME,
    "driver": m.RUNTIME,
    "cpu_op": m.CPU_OP,
    "operator": m.CPU_OP,
    "user_annotation": m.USER_ANNOTATION,
    "gpu_user_annotation": m.GPU_ANNOTATION,
    "python_function": m.PYTHON,
    "cuda_sync": m.GPU_SYNC,
}
#: Flow categories that link a CPU launch to GPU work (``fwdbwd`` links autograd ops).
LAUNCH_FLOW_CATEGORIES = frozenset({"ac2g", "async", "async_cpu_to_gpu"})


def kind_of_category(cat: object) -> str | None:
    """Reader kind of a duration event's category; ``None`` when it has none.

    Known names in any case map through :data:`CATEGORY_KIND`; ``*_runtime`` names of
    other accelerators (``mtia_runtime``) count as runtime; anything else is ``other``.
    """
    if cat is None:
        return None
    key = str(cat).lower()
    kind = CATEGORY_KIND.get(key)
    if kind is not None:
        return kind
    if key.endswith("_runtime") or key.endswith("_driver"):
        return m.RUNTIME
    return m.OTHER


#: Where an event goes, by (phase, category): a duration kind's table, or one of these.
ROUTES: tuple[str, ...] = (
    *m.DURATION_KINDS,
    "flow",
    "instant",
    "metadata",
    "missing_cat",
    "missing_ph",
    "unsupported",
)
_DURATION_ROUTES = frozenset(m.DURATION_KINDS)
_ROUTE_INDEX = {route: i for i, route in enumerate(ROUTES)}
#: The route of instants: the routes up to it are the ones that read ``ts``.
R_INSTANT = _ROUTE_INDEX["instant"]


def route_of(ph: object, cat: object) -> int:
    """Index in :data:`ROUTES` of an event with phase ``ph`` and category ``cat``."""
    if ph == "X":
        kind = kind_of_category(cat)
        return _ROUTE_INDEX["missing_cat" if kind is None else kind]
    if ph == "s" or ph == "f" or ph == "t":
        return _ROUTE_INDEX["flow"]
    if ph == "i" or ph == "I":
        return _ROUTE_INDEX["instant"]
    if ph == "M":
        return _ROUTE_INDEX["metadata"]
    if ph is None:
        return _ROUTE_INDEX["missing_ph"]
    return _ROUTE_INDEX["unsupported"]
