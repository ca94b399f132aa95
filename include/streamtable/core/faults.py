"""Crash points, so tests can kill a run at the worst moments: `STREAMTABLE_KILL_AT=<point>` SIGKILLs the process there.

Points: `staged` (batch computed and marked complete, nothing committed) and `committed:<table>`
(that table committed, the rest of the batch not); ingest's `ingest:parsed` (every line read, the data files
written, nothing committed), `ingest:appended` (the good rows committed, not the quarantine),
`ingest:quarantined` (both committed, the id not registered) and `ingest:registered` (done, nothing printed).
A Kafka copy's (`ingest/kafka.py`): `kafka:consumed` (records read, nothing committed), `kafka:quarantined` (the
bad records committed, the good ones and the offsets not) and `kafka:committed` (both committed, nothing printed).
Unset, a crash point costs one dict lookup.
"""

from __future__ import annotations

import os
import signal


def crash_point(name: str) -> None:
    if os.environ.get("STREAMTABLE_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
