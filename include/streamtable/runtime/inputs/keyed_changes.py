"""A table input as a batch sees it: its changes in the batch (Kafka Streams' `Change(old, new)` per key) and its rows
as of the version the batch consumed.

A keyed input is a table: per key, its latest record. Its changes come from the versions a batch consumed:
- a Delta table of another job read through its Change Data Feed: the feed's rows (`insert`, `update_preimage`,
  `update_postimage`, `delete`), folded per key into (its row written last before the batch, its row written last
  after it): a row appended with a key the table held is its update. The old row is the one the key's first change
  removed when the table held one row per key, else looked up; the new row the one its last change added, none when
  the changes leave the key no row, else looked up (`fold_change_feed`);
- an input changelog streamtable keeps, or a Delta table of another job without its Change Data Feed (append-only,
  its rows ordered by the versions that added them): records appended per key; a changelog's record whose columns
  other than its keys and time are all null deletes its key (a Kafka tombstone; another job's row is a row). The old
  row is the key's latest record before the batch, the new row its latest record in it.
A row that breaks the input's rules is absent from the table, as a skipped record is absent from a stream. The first
batch of an input in a generation (after a reprocess, or once the input was added) sees the table's rows at the
version it consumed as inserts, one per key (its latest): a new KTable's state arrives whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column as SparkColumn, DataFrame, functions as F

from streamtable.core.errors import INPUT_REFUSED, OperatorArgumentError
from streamtable.core.tables import COMMIT_VERSION, LINE, Table
from streamtable.storage.row_versions import UNORDERED

CHANGE = "_change"  # a Change Data Feed row's `_change_type`, kept for the fold
OLD, NEW = "old", "new"
OLDEST, NEWEST = "_oldest", "_newest"  # the span of versions a row of another job's table may have been written at
BEFORE = ("update_preimage", "delete")  # change types that carry a row as it was before the change
HELD, COUNT = "_held", "_rows"  # a lookup's row of a key (its latest, null when it breaks the rules), its rows' number
NOW = "_now"  # a key's row at the batch's version, looked up


def require_keys(table: Table) -> list[str]:
    if not table.keys:
        raise OperatorArgumentError(f"input {table.name} declares no keys: a table's changes and rows are per key")
    return list(table.keys)


def fold_change_feed(
    rows: DataFrame,
    table: Table,
    present: SparkColumn,
    held: Callable[[DataFrame], DataFrame],
    unique: bool,
    now: Callable[[DataFrame], DataFrame],
) -> tuple[DataFrame, bool]:
    """Change Data Feed rows of one batch (declared columns, `_change`, `_commit_version`) as one change per key: (its
    row written last at the version before the batch, its row written last at the batch's version); `present` is
    false for rows that break the input's rules (absent from the table). Returns the changes, and whether the table
    holds at most one row per key after the batch (`unique`: whether it did before it).

    A key's old row is the one its first change removed when the table held one row per key (`unique`), else the
    key's latest row before the batch: `held` of those keys (a keyed lookup: per key, `_held`, its latest row, null
    when it breaks the input's rules, and `_rows`, how many rows it had), as of a key whose first change inserted a
    row (a row appended with a key the table held is its update) or removed two different rows. Its new row is the
    one its last change added (the one written last), none when its changes leave it no row (its rows before, plus
    the rows the batch added, less those it removed), else `now` of those keys (the lookup at the batch's version:
    a removal left a row the feed does not name). Two different rows brought by one version have no order, and fail
    the batch in one line."""
    keys = require_keys(table)
    row = F.when(present, F.struct(*[c.name for c in table.columns]))
    before = F.col(CHANGE).isin(*BEFORE)
    # within a version a key's pre-image (or delete) comes before its post-image (or insert)
    events = rows.select(
        *keys,
        F.struct(before.alias("before"), row.alias("row"), row_id(table, row).alias("id")).alias("_e"),
        F.struct(COMMIT_VERSION, ~before).alias("_o"),
        COMMIT_VERSION,
    ).withColumn("_id", F.col("_e.id"))
    spreads = (F.col("_id"), -F.col("_id"))  # the two ends of a tie: two different rows at one place differ in id
    folded = events.groupBy(*keys).agg(
        *[F.min_by("_e", F.struct("_o", spread)).alias(f"_first{i}") for i, spread in enumerate(spreads)],
        *[F.max_by("_e", F.struct("_o", spread)).alias(f"_last{i}") for i, spread in enumerate(spreads)],
        F.max(COMMIT_VERSION).alias("_version"),
        F.sum(F.when(F.col("_e.before"), -1).otherwise(1)).alias("_grown"),  # rows added less rows removed
    )
    unclear = ~F.col("_first0.before") | (F.col("_first0.id") != F.col("_first1.id")) | F.lit(not unique)
    folded = folded.withColumn("_unclear", unclear).localCheckpoint()  # (folded once, not at each use of its changes)
    removes = F.col("_last0.before")  # the key's last change removes a row
    # when every key had one row (the one its first change removed) and keeps one at most, its last change telling
    # which: no lookup, the table is not read (a MERGE on the keys: one Spark query, whether any key is otherwise)
    special = F.col("_unclear") | (F.col("_grown") > 0) | (removes & (F.col("_grown") == 0))
    if folded.where(special).isEmpty():
        return _changed(folded.select(*keys, F.col("_first0.row").alias(OLD), _added(table, keys).alias(NEW))), unique
    found = held(folded.where("_unclear").select(*keys)).select(*keys, HELD, COUNT)
    before_rows = F.when(F.col("_unclear"), F.coalesce(COUNT, F.lit(0))).otherwise(1)
    # (kept, read once: else the batch's every use of its changes read the table again, for the lookup)
    counted = (
        null_safe_join(folded, found, keys, "left")
        .withColumn("_after", before_rows + F.col("_grown"))  # the key's rows after the batch
        .withColumn(OLD, F.when(F.col("_unclear"), F.col(HELD)).otherwise(F.col("_first0.row")))
        .localCheckpoint()
    )
    unnamed = removes & (F.col("_after") > 0)  # a removal left rows the feed does not name
    most, left = counted.agg(F.max("_after"), F.count_if(unnamed)).first() or (None, 0)
    new = _added(table, keys)
    if left:
        now_rows = now(counted.where(unnamed).select(*keys)).select(*keys, F.col(HELD).alias(NOW))
        counted = null_safe_join(counted, now_rows, keys, "left")
        new = new.when(F.col("_after") > 0, F.col(NOW))
    return _changed(counted.select(*keys, OLD, new.alias(NEW))), unique and (most or 0) <= 1


def _added(table: Table, keys: list[str]) -> SparkColumn:
    """A key's new row when its last change added it (none when it removed one)."""
    return F.when(~F.col("_last0.before"), _brought(table, keys))


def _brought(table: Table, keys: list[str]) -> SparkColumn:
    """The row a key's last change brought; two different rows brought by one version fail the batch in one line."""
    two_rows = refuse_key(
        table,
        F.to_json(F.struct(*keys)),
        F.col("_version").cast("string"),
        " of its Change Data Feed (one commit inserted or updated both), and nothing says which is the later: refused; "
        "give each key one row per version",
    )
    return F.when(F.col("_last0.id") != F.col("_last1.id"), two_rows).otherwise(F.col("_last0.row"))


def refuse_key(table: Table, key: SparkColumn, version: SparkColumn, why: str) -> SparkColumn:
    """Fails the batch in one line: key `key` (JSON) of input `table` has two rows at `version` that nothing orders
    (`why`: how, and what to do). Marked as an input's refusal (exit 2), not an error of the pipeline's code."""
    message = F.concat(
        F.lit(f"{INPUT_REFUSED}input {table.name}: key "), key, F.lit(" has two rows at version "), version, F.lit(why)
    )
    return F.raise_error(message)


def fold_changelog(changelog: DataFrame, table: Table, start: int, present: SparkColumn) -> DataFrame:
    """A keyed input changelog's records up to the batch's version as one change per key of versions `start` on."""
    keys = require_keys(table)
    row = F.when(present & ~_tombstone(table), F.struct(*[c.name for c in table.columns]))
    records = changelog.select(*keys, row.alias("_row"), F.struct(COMMIT_VERSION, LINE).alias("_o"), COMMIT_VERSION)
    touched = records.where(F.col(COMMIT_VERSION) >= start).select(*keys).distinct()
    history = null_safe_join(records, touched, keys, "left_semi")
    after = history.groupBy(*keys).agg(_latest(table, F.col("_row"), F.col("_o")).alias(NEW))
    earlier = history.where(F.col(COMMIT_VERSION) < start)
    before = earlier.groupBy(*keys).agg(_latest(table, F.col("_row"), F.col("_o")).alias(OLD))
    return _changed(null_safe_join(after, before, keys, "left").select(*keys, OLD, NEW))


def changes_between(before: DataFrame, after: DataFrame, table: Table) -> DataFrame:
    """A keyed input's change per key from its rows `before` to its rows `after` (each one per key, its columns): (its
    row before or null, its row after or null), for each key of either."""
    keys = require_keys(table)
    row = F.struct(*[c.name for c in table.columns])
    same = reduce(lambda a, b: a & b, [F.col(f"_o.{k}").eqNullSafe(F.col(f"_n.{k}")) for k in keys])
    old, new = before.select(*keys, row.alias(OLD)).alias("_o"), after.select(*keys, row.alias(NEW)).alias("_n")
    joined = old.join(new, same, "full")
    key_columns = [F.coalesce(F.col(f"_n.{k}"), F.col(f"_o.{k}")).alias(k) for k in keys]
    return _changed(joined.select(*key_columns, F.col(f"_o.{OLD}"), F.col(f"_n.{NEW}")))


def latest_rows(changelog: DataFrame, table: Table, present: SparkColumn) -> DataFrame:
    """A keyed input changelog's current rows (one per key: its latest record, unless that deletes the key)."""
    keys = require_keys(table)
    row = F.when(present & ~_tombstone(table), F.struct(*[c.name for c in table.columns]))
    latest = changelog.groupBy(*keys).agg(_latest(table, row, F.struct(COMMIT_VERSION, LINE)).alias("_row"))
    return latest.where(F.col("_row").isNotNull()).select("_row.*")


@dataclass(frozen=True)
class Written:
    """A Delta table's rows grouped per key (`written_per_key`): `per_key` holds each key's rows' spans, `_all`, and
    `last` is its row written last (failing the batch, in one line, when two different rows are not ordered)."""

    per_key: DataFrame
    last: SparkColumn
    keys: tuple[str, ...]

    def rows(self) -> DataFrame:
        """One row per key: its row written last, unless it breaks the input's rules; the batch fails, in one line, when
        two different rows of a key are not ordered by their spans."""
        latest = self.per_key.select(self.last.alias("_row"))
        return latest.where(F.col("_row").isNotNull()).select("_row.*")

    def held(self) -> DataFrame:
        """Per key: its key columns, its row written last (`_held`) and its number of rows (`_rows`)."""
        return self.per_key.select(*self.keys, self.last.alias(HELD), F.size("_all").alias(COUNT))

    def kept(self) -> Written:
        """The same, computed once (a local checkpoint: its uses read the table no more)."""
        return Written(self.per_key.localCheckpoint(), self.last, self.keys)

    def keys_unique(self) -> bool:
        """Whether every key has one row at most (a Spark job over `per_key`)."""
        most = self.per_key.agg(F.max(F.size("_all"))).first()
        return most is None or (most[0] or 0) <= 1


def written_per_key(rows: DataFrame, table: Table, present: SparkColumn) -> Written:
    """A Delta table's rows (with `_oldest` and `_newest`: the span of versions each may have been written at,
    `storage.row_versions`) grouped per key."""
    keys = require_keys(table)
    row = F.when(present, F.struct(*[c.name for c in table.columns]))
    written = F.struct(F.col(NEWEST).alias("newest"), F.col(OLDEST).alias("oldest"), row_id(table, row).alias("id"))
    per_key = rows.groupBy(*keys).agg(
        F.max_by(row, written).alias("_row"), F.max(written).alias("_top"), F.collect_list(written).alias("_all")
    )
    top = F.col("_top")
    unordered = F.exists("_all", lambda w: (w["id"] != top["id"]) & (w["newest"] >= top["oldest"]))
    refused = refuse_key(
        table,
        F.to_json(F.struct(*keys)),
        top["newest"].cast("string"),
        UNORDERED,
    )
    return Written(per_key, F.when(unordered, refused).otherwise(F.col("_row")), tuple(keys))


def _latest(table: Table, row: SparkColumn, order: SparkColumn) -> SparkColumn:
    """The aggregate of a key's records: its row of the greatest order ((version, line)); the batch fails, in one line,
    when two different rows share it: a Delta table of another job without its Change Data Feed orders its rows by the
    version that added them only (two rows of one key in one commit, or compacted into one file by OPTIMIZE)."""
    if not table.external:  # a changelog streamtable keeps orders its records by (version, line): no two share one
        return F.max_by(row, order)
    spread = row_id(table, row)
    first, other = F.max_by(row, F.struct(order, spread)), F.max_by(spread, F.struct(order, -spread))
    key = F.to_json(F.struct(*table.keys))
    version = F.max(order.getField(COMMIT_VERSION)).cast("string")
    ambiguous = refuse_key(
        table,
        key,
        version,
        " (one commit added both, or an OPTIMIZE compacted them into one file), and without the table's Change Data "
        "Feed nothing says which is the later: refused; give each key one row per version, or the table its Change "
        "Data Feed",
    )
    return F.when(F.max_by(spread, F.struct(order, spread)) != other, ambiguous).otherwise(first)


def as_inserts(rows: DataFrame, table: Table) -> DataFrame:
    """A table's rows as changes that insert them (the first batch of a table input)."""
    keys = require_keys(table)
    row = F.struct(*[c.name for c in table.columns])
    absent = F.lit(None).cast(rows.select(row).schema[0].dataType)
    return rows.select(*keys, absent.alias(OLD), row.alias(NEW))


def of_keys(rows: DataFrame, keys_of: DataFrame | None, keys: Sequence[str]) -> DataFrame:
    """The rows whose keys (null-safely) are those of a row of `keys_of` (all rows when it is None)."""
    if keys_of is None:
        return rows
    return null_safe_join(rows, keys_of.select(*keys).distinct(), keys, "left_semi")


def null_safe_join(left: DataFrame, right: DataFrame, keys: Sequence[str], how: str) -> DataFrame:
    """`left` joined with `right` on `keys`, a null key equal to a null key (SQL's `<=>`), with one copy of the keys."""
    condition: SparkColumn = reduce(lambda a, b: a & b, [F.col(f"_l.{k}").eqNullSafe(F.col(f"_r.{k}")) for k in keys])
    joined = left.alias("_l").join(right.alias("_r"), condition, how)
    if how in ("left_semi", "left_anti"):
        return joined
    rest = [F.col(f"_r.{c}") for c in right.columns if c not in keys]
    return joined.select(*[F.col(f"_l.{c}") for c in left.columns], *rest)


def row_id(table: Table, row: SparkColumn) -> SparkColumn:
    """A hash of an input's row, equal for equal rows (a different one for different rows, but for a collision): of
    its JSON text when a column holds a map, which Spark does not hash (two equal maps in another order then differ)."""
    return F.xxhash64(F.to_json(row) if any("MAP<" in c.type.ddl for c in table.columns) else row)


def _tombstone(table: Table) -> SparkColumn:
    """A changelog record that deletes its key: every column but the keys and the time is null (none: never). A Delta
    table of another job has none: a row whose values are null is a row, as its Change Data Feed says (its deletes)."""
    values = [c.name for c in table.columns if c.name not in table.keys and c.name != table.time_column]
    if not values or table.external:
        return F.lit(False)
    return reduce(lambda a, b: a & b, [F.col(v).isNull() for v in values])


def _changed(changes: DataFrame) -> DataFrame:
    """Leave out keys whose row the batch left as it was: neither an old nor a new row (inserted and deleted within
    the batch), or equal ones (a record sent again as it was: Kafka Streams' emit-on-change). Rows with a map, which
    Spark cannot compare, are told apart only by being there."""
    if "map<" in changes.schema[OLD].dataType.simpleString():
        return changes.where(F.col(OLD).isNotNull() | F.col(NEW).isNotNull())
    return changes.where(~F.col(OLD).eqNullSafe(F.col(NEW)))
