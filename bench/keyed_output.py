"""An `inventory` output of N keys that the pipeline takes as its own, made without draining N events (issue 38).

A lake's first batch is a real one, run by the caller (`streamtable run` or `lifecycle.run`): `SEED_KEYS` events
(`seed_events`: one on each of keys 0..999). It creates the output with the pipeline's own schema, table properties
and metadata, the generation's checkpoint and its committed batch. `fill` then appends keys 1000..N-1 to that same
table in one delta-rs commit, streamed a million rows at a time (the process's memory stays a record batch's):
- in a pseudo-random order (the i-th row holds key 1000 + (i * A) mod (N - 1000), a permutation), as a batch's
  MERGE leaves the rows Spark's aggregation hashed, not sorted: a file's key statistics span the whole key space;
- with quantities drawn as events draw them, less their sum on each million's last row, so they add up to 0 and the
  table's sum still equals the `quantity` metric of the committed batches: the gate's `sum_equals` keeps holding
  (and `streamtable validate` passes on the result).
The fill's commit names itself in its commit info and carries no app transaction (it is no batch); the inputs and the
generation's offsets are untouched, so the next batch reads its own new events only.
Key number k is item `i{k // STORES}` of store `s{k % STORES}`, as in `key_events`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import workloads
from deltalake import CommitProperties

from streamtable.storage import delta_rs
from streamtable.storage.lake import Lake

STORES = 100
SEED_KEYS = 1000
TABLE = "inventory"
CHUNK = 1_000_000
MULTIPLIER = 2_654_435_761  # a prime: i -> i * A mod M is a permutation of 0..M-1 when A and M are coprime
FILLED_BY = {"bench": "keyed_output.fill"}  # the fill's commit info says what wrote it


def key_events(keys: np.ndarray, rng: np.random.Generator) -> workloads.Columns:
    """One inventory event for each key number."""
    return {
        "store": workloads.names("s", keys % STORES),
        "item": workloads.names("i", keys // STORES),
        "quantity": rng.integers(-20, 50, len(keys)),
        "event_time": workloads.START_US + keys,
    }


def seed_events(rng: np.random.Generator) -> workloads.Columns:
    """The first batch's events: one on each of keys 0..SEED_KEYS-1."""
    return key_events(np.arange(SEED_KEYS), rng)


def fill(lake: Lake, keys: int, seed: int = 38) -> int:
    """Append keys SEED_KEYS..keys-1 to the lake's `inventory` output (after its first batch); its new version."""
    path = lake.table_path(TABLE)
    if keys <= SEED_KEYS:
        return delta_rs.delta_table(path).version()
    schema = delta_rs.table_schema(delta_rs.delta_table(path))
    rows = pa.RecordBatchReader.from_batches(schema, _rows(schema, keys, np.random.default_rng(seed)))
    delta_rs.write(path, rows, mode="append", commit_properties=CommitProperties(custom_metadata=FILLED_BY))
    return delta_rs.delta_table(path).version()


def _rows(schema: pa.Schema, keys: int, rng: np.random.Generator) -> Iterator[pa.RecordBatch]:
    count = keys - SEED_KEYS
    multiplier = _coprime(MULTIPLIER % max(count, 1), count)
    for start in range(0, count, CHUNK):
        numbers = SEED_KEYS + np.arange(start, min(count, start + CHUNK), dtype=np.int64) * multiplier % count
        quantity = rng.integers(-20, 50, len(numbers))
        quantity[-1] -= quantity.sum()
        store = pc.binary_join_element_wise("s", pa.array(numbers % STORES).cast(pa.string()), "")
        item = pc.binary_join_element_wise("i", pa.array(numbers // STORES).cast(pa.string()), "")
        yield pa.record_batch([store, item, pa.array(quantity)], schema=schema)


def _coprime(candidate: int, modulus: int) -> int:
    """The first number from `candidate` up that shares no factor with `modulus`."""
    while math.gcd(candidate, modulus) != 1:
        candidate += 1
    return candidate
