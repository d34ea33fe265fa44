"""``service/shared_answers.py``: answers made once for concurrent identical requests,
kept within bounds, and at most ``at_once`` heavy answers made at a time (issue 47:
four concurrent ``/diff`` of a 400-rank run cost 3.9x the CPU and +2.06 GB)."""

from __future__ import annotations

import threading
import time

import pytest

from tb_kineto_insights.service import shared_answers
from tb_kineto_insights.service.errors import Unreadable
from tb_kineto_insights.service.shared_answers import SharedAnswers


def _together(n: int, ask: object) -> list[object]:
    out: list[object] = []
    threads = [threading.Thread(target=lambda: out.append(ask())) for _ in range(n)]  # type: ignore[operator]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return out


def test_concurrent_requests_of_one_key_make_it_once() -> None:
    answers = SharedAnswers()
    made: list[int] = []

    def make() -> tuple[str, int]:
        made.append(1)
        time.sleep(0.3)  # the other requests arrive meanwhile
        return "answer", 6

    got = _together(6, lambda: answers.get("k", make))
    assert got == ["answer"] * 6 and len(made) == 1
    assert answers.get("k", make) == "answer" and len(made) == 1  # kept


def test_an_error_reaches_every_waiter_and_is_not_kept() -> None:
    answers = SharedAnswers()
    made: list[int] = []

    def make() -> tuple[str, int]:
        made.append(1)
        time.sleep(0.3)
        raise Unreadable("base: no trace could be read")

    def ask() -> object:
        try:
            return answers.get("k", make)
        except Unreadable as exc:
            return str(exc)

    got = _together(4, ask)
    assert got == ["base: no trace could be read"] * 4 and len(made) == 1
    assert ask() == "base: no trace could be read" and len(made) == 2  # made again


def test_an_answer_without_a_size_is_shared_but_not_kept() -> None:
    answers = SharedAnswers()
    made: list[int] = []

    def make() -> tuple[str, None]:
        made.append(1)
        return "loading", None

    assert answers.get("k", make) == "loading"
    assert answers.get("k", make) == "loading" and len(made) == 2


def test_kept_answers_are_bounded_in_number_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = SharedAnswers(kept=3, kept_bytes=100)
    for i in range(5):
        answers.get(i, lambda i=i: (i, 10))  # type: ignore[misc]
    assert list(answers._kept) == [2, 3, 4]
    answers.get("big", lambda: ("big", 95))
    assert list(answers._kept) == ["big"]  # the older ones dropped to stay within 100
    monkeypatch.setattr(shared_answers, "KEPT_ONE_BYTES", 50)
    answers.get("huge", lambda: ("huge", 60))
    assert "huge" not in answers._kept


def test_distinct_heavy_answers_are_made_at_most_at_once_at_a_time() -> None:
    answers = SharedAnswers(at_once=2)
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def make() -> tuple[int, int]:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return 1, 1

    keys = iter(range(100))
    key_lock = threading.Lock()

    def ask() -> object:
        with key_lock:
            key = next(keys)
        return answers.get(key, make)

    assert _together(6, ask) == [1] * 6
    assert 1 <= peak[0] <= 2
    # light answers (heavy=False) are not held back: four are made at the same time
    all_in = threading.Barrier(4)

    def light() -> tuple[int, int]:
        all_in.wait(timeout=30)
        return 1, 1

    assert _together(4, lambda: answers.get(object(), light, heavy=False)) == [1] * 4
