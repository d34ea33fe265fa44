"""The series of the log directory sample_logs/ (real recordings, each a job of its own):
the test of ``test_history.py``'s subject that reads them; ``make quick`` leaves out a
module named ``*_real.py`` (``tests/conftest.py``)."""

from __future__ import annotations

from test_history import T0, headline, one

from tb_kineto_insights.compare.history import build_history, series_keys


def test_sample_logs_runs_are_not_grouped_by_accident() -> None:
    """The demo runs of sample_logs are different jobs: none shares a counter stem, so
    each is a series of its own, by its whole name (they were one series
    ``sample_logs``, and ``eff_mlp_fp32`` was shown as ``eff_mlp_fp``)."""
    from conftest import SAMPLE_LOGS

    names = sorted(p.name for p in SAMPLE_LOGS.iterdir() if p.is_dir())
    assert {"eff_mlp_fp32", "eff_conv_bf16", "dataloader_workers0", "ddp2_default"} <= set(names)
    runs = [one(n, headline(100, start_ns=T0 + i)) for i, n in enumerate(names)]
    keys = series_keys(runs, "sample_logs", None)
    assert keys == [(n, "run") for n in names]
    doc = build_history(runs, logdir="sample_logs", metrics=["step_time"])
    assert [s.name for s in doc.series] == names
    assert all(len(s.runs) == 1 and s.changes == [] for s in doc.series)
