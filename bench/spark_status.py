"""What Spark ran, from its status store (kept with its UI off): the jobs since an id, and their time by kind."""

from __future__ import annotations

from collections import defaultdict


def spark_jobs(spark, after: int) -> tuple[int, list[dict]]:
    """The Spark jobs whose ids are above `after` (from the status store, which Spark keeps with its UI off): the
    highest id seen, and each job's description, duration and tasks."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    found, highest = [], after
    for i in range(jobs.size()):
        job = jobs.apply(i)
        if job.jobId() <= after:
            continue
        highest = max(highest, job.jobId())
        start, end = job.submissionTime(), job.completionTime()
        ms = end.get().getTime() - start.get().getTime() if start.isDefined() and end.isDefined() else None
        text = job.description().getOrElse(None) if job.description().isDefined() else None
        found.append({"job": job.jobId(), "name": text or job.name(), "ms": ms, "tasks": job.numTasks()})
    return highest, sorted(found, key=lambda j: j["job"])


def by_kind(jobs: list[dict]) -> dict[str, list[int]]:
    """Jobs grouped by their description's first line (a streaming batch's id, version numbers left out): [jobs, ms]."""
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for job in jobs:
        name = job["name"].splitlines()[0].split(": Compute snapshot")[0].split(" at ")[0][:80]
        kinds[name][0] += 1
        kinds[name][1] += job["ms"] or 0
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1][1]))
