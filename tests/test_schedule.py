"""The order in which one batch prepares submissions: learn each lab's cost early, then run the
longest labs first, so the batch does not end with one long notebook running alone."""

from __future__ import annotations

from mlbook.grading.batch import _Schedule
from mlbook.grading.status import ERROR, GRADED, Attempt, StatusStore


def _todo(per_lab: dict[str, int]) -> list[tuple[str, str]]:
    return [(lab, f"s{i}") for lab, n in per_lab.items() for i in range(n)]


def test_labs_timed_in_earlier_runs_go_longest_first(tmp_path):
    store = StatusStore(tmp_path / "status.json")
    for lab, seconds in (("short", 3.0), ("long", 30.0), ("medium", 10.0)):
        store.record(Attempt(lab, "earlier", GRADED, seconds=seconds))
    order = [lab for lab, _ in _Schedule(_todo({"short": 2, "long": 2, "medium": 2}), store)]
    assert order == ["long", "long", "medium", "medium", "short", "short"]


def test_a_lab_never_timed_starts_once_before_the_rest_then_waits_for_its_cost(tmp_path):
    store = StatusStore(tmp_path / "status.json")
    store.record(Attempt("known", "earlier", GRADED, seconds=5.0))
    schedule = _Schedule(_todo({"known": 2, "new": 3}), store)
    picks = iter(schedule)
    assert next(picks) == ("new", "s0"), "a lab never timed should start first, to learn its cost"
    assert next(picks) == ("new", "s1"), "a file that failed to prepare teaches nothing about the lab"
    schedule.submitted("new")
    assert next(picks)[0] == "known", "an untimed lab already running counts as average, not as longest"
    schedule.done(Attempt("new", "s0", GRADED, seconds=40.0))
    assert [lab for lab, _ in picks] == ["new", "known"]


def test_errors_and_untimed_attempts_teach_the_schedule_nothing(tmp_path):
    schedule = _Schedule(_todo({"a": 1, "b": 1}), StatusStore(tmp_path / "status.json"))
    schedule.done(Attempt("a", "x", ERROR, seconds=99.0))
    schedule.done(Attempt("b", "x", GRADED, seconds=0.0))
    assert schedule.seconds == {"a": [], "b": []}
