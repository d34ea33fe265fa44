"""`check --fail-on`: every diagnosis id, span-level and run-level, and its exit codes.
Real traces: ``test_check_real.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import as_json, cpu, kernel, real_summary, write_trace
from msgspec.structs import replace

from tb_kineto_insights import summary
from tb_kineto_insights.analysis.rules import DIAGNOSIS_IDS
from tb_kineto_insights.analysis.rules.base import make_diagnosis
from tb_kineto_insights.cli.main import EXIT_OK, EXIT_REGRESSION, EXIT_UNUSABLE, main
from tb_kineto_insights.compare import before_after as compare
from tb_kineto_insights.compare.diff import diagnoses_found, side_run_view
from tb_kineto_insights.schema import RunView, Summary
from tb_kineto_insights.schema.diagnoses import Diagnosis
from tb_kineto_insights.schema.run_view import SupersededDiagnosis
from tb_kineto_insights.summary import SpanOk


def _launch(ts: float, corr: int) -> dict[str, Any]:
    event = cpu("cudaLaunchKernel", ts, 2, cat="cuda_runtime")
    event["args"] = {"correlation": corr}
    return event


def _healthy(path: Path) -> Path:
    """5 steps of 200 µs, GPU busy 96.5 % (kernels back to back): no diagnosis fires."""
    events: list[dict[str, Any]] = []
    corr = 0
    for s in range(5):
        t0 = 1000.0 + s * 200
        events.append(cpu(f"ProfilerStep#{s + 1}", t0, 200, cat="user_annotation"))
        for name, start, dur in (("A", 6, 10), ("B", 16, 20), ("C", 36, 163)):
            corr += 1
            events.append(_launch(t0 + start - 5, corr))
            events.append(kernel(name, t0 + start, dur, corr=corr))
    return write_trace(path, events)


@pytest.fixture
def two_ranks(tmp_path: Path) -> tuple[Path, Path]:
    """A base and an experiment run folder, each with two healthy workers."""
    for side in ("base", "exp"):
        for worker in ("w0", "w1"):
            _healthy(tmp_path / side / f"{worker}.1.pt.trace.json")
    return tmp_path / "base", tmp_path / "exp"


def _diagnosis(id_: str) -> Diagnosis:
    return make_diagnosis(id_, "medium", f"injected {id_}", {}, "none", "test", 0.2)


def _summary(*ids: str) -> Summary:
    """A real summary of a tiny trace, with these diagnoses."""
    return replace(msgspec.convert(real_summary(), Summary), diagnoses=[_diagnosis(i) for i in ids])


def _view(**fields: Any) -> RunView:
    """The run view of two tiny real spans (no collectives), with ``fields`` replaced."""
    run = summary.summarize_run([("r0", _summary()), ("r1", _summary())])
    return replace(run, **fields)


def test_healthy_runs_have_no_diagnosis(two_ranks: tuple[Path, Path]) -> None:
    base, exp = two_ranks
    doc = compare.compare(compare.load_side(str(base)), compare.load_side(str(exp)))
    assert as_json(doc.diagnoses.found) == {"base": [], "exp": []}


@pytest.mark.parametrize("scope", ["span", "run"])
@pytest.mark.parametrize("id_", DIAGNOSIS_IDS)
def test_fail_on_every_id(
    id_: str,
    scope: str,
    two_ranks: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Absent → exit 0; present in the experiment (on one rank's span, or in the run view
    across ranks) → exit 1 naming the id and where; present only in the base → exit 0."""
    base, exp = two_ranks
    args = ["check", str(base), str(exp), "--fail-on", id_]
    assert main(args) == EXIT_OK
    assert "OK: no limit crossed" in capsys.readouterr().out

    def inject(into: Path) -> None:
        if scope == "span":
            real = compare.summarize_span

            def with_diagnosis(path: str, **kw: Any) -> Any:
                r = real(path, **kw)
                if isinstance(r, SpanOk) and Path(path).parent == into and "w1." in path:
                    r = SpanOk(
                        replace(r.summary, diagnoses=[*r.summary.diagnoses, _diagnosis(id_)])
                    )
                return r

            monkeypatch.setattr(compare, "summarize_span", with_diagnosis)
        else:
            real_run = summary.summarize_run
            on_side: set[int] = set()  # id() of the summaries of the side ``into``

            def run_with_diagnosis(workers: Any, thresholds: Any = None) -> RunView:
                run = real_run(workers, thresholds) if thresholds else real_run(workers)
                if workers and id(workers[0][1]) in on_side:
                    run = replace(run, diagnoses=[*run.diagnoses, _diagnosis(id_)])
                return run

            real = compare.summarize_span

            def tagged(path: str, **kw: Any) -> Any:
                r = real(path, **kw)
                if isinstance(r, SpanOk) and Path(path).parent == into:
                    on_side.add(id(r.summary))
                return r

            monkeypatch.setattr(compare, "summarize_span", tagged)
            monkeypatch.setattr(summary, "summarize_run", run_with_diagnosis)

    inject(exp)
    assert main(args) == EXIT_REGRESSION
    out = capsys.readouterr().out
    where = "all ranks" if scope == "run" else "w1/"
    assert f"FAIL: diagnosis {id_} present in {exp}" in out and where in out
    assert f"injected {id_}" in out
    # another id than the one present: still fine
    other = next(i for i in DIAGNOSIS_IDS if i != id_)
    assert main(["check", str(base), str(exp), "--fail-on", other]) == EXIT_OK
    capsys.readouterr()
    monkeypatch.undo()
    inject(base)  # only the base has it: the experiment is clean
    assert main(args) == EXIT_OK


def test_unknown_id_refused(
    two_ranks: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    base, exp = two_ranks
    assert main(["check", str(base), str(exp), "--fail-on", "straggler"]) == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert "unknown diagnosis id(s) straggler" in err and "communication_straggler" in err


def test_superseded_span_diagnoses_are_left_out() -> None:
    """A run view that restates rank 0's exposed_communication (its exact wait/transfer
    split) lists it in ``superseded_span_diagnoses``: rank 0's span-level one is left
    out of what check sees, rank 1's and every other stay."""

    side = [
        ("r0/1", _summary("exposed_communication", "small_kernel_flood")),
        ("r1/1", _summary("exposed_communication")),
    ]
    run = _view(
        diagnoses=[_diagnosis("exposed_communication")],
        superseded_span_diagnoses=[
            SupersededDiagnosis(worker="r0", rank=0, id="exposed_communication")
        ],
    )
    found = [(f.id, f.where) for f in diagnoses_found(side, run)]
    assert found == [
        ("small_kernel_flood", "r0/1"),
        ("exposed_communication", "r1/1"),
        ("exposed_communication", "all ranks"),
    ]
    assert len(diagnoses_found(side, None)) == 3


def test_run_view_input_chosen_like_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """The diff's run view takes its input from ``summary.select_run_spans`` (spans
    grouped by worker, in order) and puts its notes first; a side of one worker has none."""
    seen: list[Any] = []

    def select(workers: Any, span_index: int = -1) -> tuple[list[Any], list[str]]:
        seen.append([(w, [s["tag"] for s in spans]) for w, spans in workers])
        return [(w, spans[-1]) for w, spans in workers], ["chosen: latest spans"]

    view_of_fake = _view(notes=["view note"])

    def fake_run(workers: Any, thresholds: Any = None) -> RunView:
        seen.append([(name, s["tag"]) for name, s in workers])
        return view_of_fake

    monkeypatch.setattr(summary, "select_run_spans", select)
    monkeypatch.setattr(summary, "summarize_run", fake_run)
    side = [("a/1", {"tag": "a1"}), ("a/2", {"tag": "a2"}), ("b/1", {"tag": "b1"})]
    view = side_run_view(side)
    assert view == replace(view_of_fake, notes=["chosen: latest spans", "view note"])
    assert seen == [[("a", ["a1", "a2"]), ("b", ["b1"])], [("a", "a2"), ("b", "b1")]]
    assert side_run_view(side[:2]) is None
