"""The event trigger that wakes a pipeline scheduled `on_data`: a Delta table's version moved.

`DeltaVersionTrigger` runs in Airflow's triggerer as the `AssetWatcher` of an input's Asset
(`streamtable.airflow.assets.table_asset`). It polls the table's latest version with delta-rs (no Spark, no JVM),
and yields one event each time the version moves past the last one it reported; the scheduler turns each event into
an asset event of the input, which queues a run of every DAG scheduled on it. So whatever writes the table wakes
the pipeline: `streamtable ingest` from a shell, the ingest DAGs' copiers, another job's Delta writer.

What Airflow asks of an event trigger: it is a `BaseEventTrigger` (an `AssetWatcher` refuses any other), its
`serialize()` names the class and its keyword arguments, which identify it (the hash of both: a DAG file parsed
again with the same arguments keeps the same trigger), and its `run()` is an async generator that may run forever.
The triggerer restarts it with the same arguments (a new triggerer, a re-parse), so the last version reported is
kept in the Asset's state store (`asset_state_store`, Airflow 3.3), not in the arguments: a restarted watcher does
not report a version twice. A watcher that has never reported takes the version it finds when it first starts as
consumed (a pipeline's earlier data is what its first run, by hand or on a later version, processes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

STATE_KEY = "reported_version"  # the key of the Asset's state store that holds the last version reported


class DeltaVersionTrigger(BaseEventTrigger):
    """Yields `{"table", "path", "version", "previous"}` each time the Delta table at `path` has a newer version than
    the last one reported; polls every `poll_interval` seconds, with delta-rs in a thread."""

    def __init__(self, *, table: str, path: str, poll_interval: float = 1.0):
        super().__init__()
        self.table, self.path, self.poll_interval = table, path, poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"table": self.table, "path": self.path, "poll_interval": self.poll_interval},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        reported = await self._stored()
        while True:
            version = await asyncio.to_thread(self._version)
            if reported is None:
                reported = -1 if version is None else version  # the first start: what is there now counts as seen
                await self._store(reported)
            elif version is not None and version > reported:
                yield TriggerEvent({"table": self.table, "path": self.path, "version": version, "previous": reported})
                reported = version
                await self._store(version)
            await asyncio.sleep(self.poll_interval)

    def _version(self) -> int | None:
        """The table's latest version; None while it does not exist (or cannot be read: the next poll tries again)."""
        from streamtable.core.errors import TableReadError
        from streamtable.storage.delta_rs import table_version

        try:
            return table_version(self.path)
        except TableReadError as e:
            self.log.warning("cannot read %s's version at %s: %s", self.table, self.path, e)
            return None

    async def _stored(self) -> int | None:
        store = self.asset_state_store
        value = None if store is None else await store.aget(STATE_KEY)
        return value if isinstance(value, int) else None

    async def _store(self, version: int) -> None:
        if self.asset_state_store is not None:
            await self.asset_state_store.aset(STATE_KEY, version)
