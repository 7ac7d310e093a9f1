"""Grading at scale gives the same grades: 1 worker, 2 workers with kernels started cold instead
of forked warm, the default (adaptive) number of workers, a Dask cluster of two workers (real
scheduler and worker processes on loopback) and a shared PostgreSQL gradebook."""

from __future__ import annotations

import pytest

from harness import scratch_course
from mlbook.authoring import submissions
from mlbook.labs import load_catalogue
from mlbook.grading import GradingOptions, autograde
from mlbook.outputs.results import collect
from servers import dask_cluster, postgres_server

LAB = "lab02_scaling"
pytestmark = [pytest.mark.xdist_group("scale"), pytest.mark.slow]


def make_class(root, db_url: str | None = None):
    course = scratch_course(LAB, root)
    if db_url:
        with course.config.open("a") as config:
            config.write(f"\nc.CourseDirectory.db_url = {db_url!r}\n")
    mutants = load_catalogue(LAB).mutants
    submissions.submit(course, "correct", LAB, submissions.reference(course, LAB))
    for mutant in (mutants[0], mutants[3]):
        submissions.submit(course, f"wrong-{mutant.name}", LAB, submissions.reference(course, LAB, mutant.cells))
    submissions.submit(course, "untouched", LAB, submissions.untouched(course, LAB))
    submissions.submit(course, "broken", LAB, raw=submissions.corrupt_text(course, LAB))
    return course


def grades(course) -> dict:
    return {r.student: (r.status, {g: c.score for g, c in sorted(r.cells.items())}) for r in collect(course, LAB)}


def test_grades_are_identical_for_one_worker_many_workers_dask_and_postgres(tmp_path_factory, monkeypatch):
    base = tmp_path_factory.mktemp("scale")
    runs = {}
    one = make_class(base / "one-worker")
    autograde(one, LAB, progress=False, options=GradingOptions(workers=1))
    runs["1 worker"] = grades(one)

    monkeypatch.setenv("MLBOOK_FORKSERVER", "0")  # every kernel started cold, as without root
    cold = make_class(base / "cold-kernels")
    autograde(cold, LAB, progress=False, options=GradingOptions(workers=2))
    runs["2 workers, cold kernels"] = grades(cold)
    monkeypatch.delenv("MLBOOK_FORKSERVER")

    adaptive = make_class(base / "default-workers")
    autograde(adaptive, LAB, progress=False, options=GradingOptions())  # one per core, more while cores idle
    runs["default workers"] = grades(adaptive)

    with dask_cluster(base / "dask") as address:
        cluster = make_class(base / "dask-class")
        autograde(cluster, LAB, progress=False, options=GradingOptions(scheduler=address))
        runs["dask"] = grades(cluster)

    with postgres_server() as url:
        shared = make_class(base / "postgres-class", db_url=url)
        assert shared.db_url == url
        autograde(shared, LAB, progress=False, options=GradingOptions(workers=2))
        runs["postgres"] = grades(shared)
        assert not (shared.root / "gradebook.db").exists(), "grades went to sqlite, not to PostgreSQL"

    reference = runs["1 worker"]
    assert reference["correct"][0] == "graded" and reference["broken"][0] == "error"
    assert sum(s or 0 for s in reference["correct"][1].values()) > sum(s or 0 for s in reference["untouched"][1].values())
    for name, table in runs.items():
        assert table == reference, f"{name} graded differently from 1 worker"
