"""An input's offsets read with delta-rs, Spark-free: its Delta versions and their commit times, and the first
version committed at or after a time (where `reprocess --from-timestamp` starts; `streamtable.requests` checks
requests with it). Nothing here imports pyspark or Airflow.
"""

from __future__ import annotations

from datetime import UTC, datetime

from streamtable.storage.lake import Lake


def commits(lake: Lake, table: str) -> list[tuple[int, float]]:
    """(version, commit time in epoch ms) of every commit of an input table, oldest first; [] if it has none.

    The input's table is in the lake, or where a Delta table of another job is (`external.path_of`).
    """
    from streamtable.storage.delta_rs import open_table
    from streamtable.storage.external import path_of

    delta = open_table(path_of(lake, table))
    if delta is None:
        return []
    return sorted((c["version"], c["timestamp"]) for c in delta.history())


def commit_time(lake: Lake, table: str, version: int) -> datetime | None:
    """When `version` of an input was committed, as its log entry records it (the time `status` and `history` show).

    Delta Spark's `_commit_timestamp` is the log file's modification time instead, which can be a millisecond
    earlier; None once log cleanup has removed the entry.
    """
    from streamtable.storage.delta_rs import log_entry
    from streamtable.storage.external import path_of

    entry = log_entry(path_of(lake, table), version)
    millis = None if entry is None else entry.info.get("timestamp")
    return datetime.fromtimestamp(millis / 1000, UTC) if millis is not None else None


def first_version_since(lake: Lake, table: str, moment: datetime) -> int | None:
    """The first version of `table` committed at or after `moment`, or None.

    This is what `reprocess --from-timestamp` seeks.
    """
    millis = moment.timestamp() * 1000
    return next((version for version, committed in commits(lake, table) if committed >= millis), None)
