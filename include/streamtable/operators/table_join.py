"""Table-table joins with retraction (Kafka's KTable-KTable join, leftJoin and outerJoin, kept as a table)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Literal

from pyspark.sql import Column, DataFrame, functions as F

from streamtable.core.errors import OperatorArgumentError

RETRACT = "_retract"  # the flag column of the rows this returns: true removes the key from the result

How = Literal["inner", "left", "outer"]


def join_on_keys(rows: DataFrame, other: DataFrame, keys: Sequence[str], how: str) -> DataFrame:
    """`rows` joined with `other` on `keys`, null-safely (a null key equals a null key, as the commits' MERGE).

    The key columns are `rows`'; for a left join, `other`'s other columns are null where it has no row.
    """
    probe = other.select(*[F.col(k).alias(f"_key{i}") for i, k in enumerate(keys)], *_values(other, keys))
    condition = reduce(lambda a, b: a & b, [F.col(k).eqNullSafe(F.col(f"_key{i}")) for i, k in enumerate(keys)])
    joined = rows.join(probe, condition, how)
    return joined if how in ("left_semi", "left_anti") else joined.drop(*[f"_key{i}" for i in range(len(keys))])


def _values(frame: DataFrame, keys: Sequence[str]) -> list[str]:
    return [c for c in frame.columns if c not in keys]


def _after(current: DataFrame, changes: DataFrame, keys: Sequence[str], flag: str) -> DataFrame:
    """A side's content once its changes apply: changed keys take the change's row, or vanish where it is flagged."""
    deleted = F.col(flag) if flag in changes.columns else F.lit(False)
    kept = join_on_keys(current, changes.select(*keys), keys, "left_anti")
    return kept.unionByName(changes.where(~deleted).select(*current.columns))


def table_join(
    left: DataFrame,
    left_changes: DataFrame,
    right: DataFrame,
    right_changes: DataFrame,
    keys: Sequence[str],
    how: How = "inner",
    *,
    keep: Column | None = None,
    result: DataFrame | None = None,
    flag: str = RETRACT,
) -> DataFrame:
    """Each key changed on either side gets its result row recomputed from both sides, or retracted if it has none.

    `left` and `right` are the two tables keyed by `keys` (one row per key), as committed before the batch
    or after it (their changes then change nothing): at least the rows of the keys changed on either side,
    so a keyed lookup will do. `left_changes` and `right_changes` are the rows that replace same-key rows
    this batch; a change row whose `flag` column is true removes its key from that side (`changed_rows`
    makes this form of a table input's `batch.changes(...)`; the output of one join can feed another).
    The result is the join of the two sides on `keys`, null-safely (a null key is a key), as Kafka's
    KTable joins: `how="inner"` a row per key on both sides, `"left"` per key on the left side (the right
    side's columns null where it has no row), `"outer"` per key on either side (the missing side's columns
    null), filtered by `keep`. Returned: one row per key changed on either side, with `keys`, the left
    side's other columns, the right side's, and `flag`: false with the recomputed row if the key has a
    result row that passes `keep`, true (a retraction) otherwise; when `result` (the committed result table)
    is given, retractions are only returned for keys it holds. Stage it with
    `batch.upsert(table, rows, delete=flag)`. The two sides' non-key columns must not share names.
    Accounts with their limits, two table inputs keyed by account:

        accounts, limits = changed_rows(batch.changes("accounts")), changed_rows(batch.changes("limits"))
        touched = accounts.select("account").unionByName(limits.select("account"))
        rows = table_join(
            batch.rows("accounts", keys_of=touched), accounts, batch.rows("limits", keys_of=touched), limits,
            ["account"], how="left",
        )
        batch.upsert("accounts_with_limits", rows, delete=RETRACT)
    """
    if how not in ("inner", "left", "outer"):
        raise OperatorArgumentError(f"table_join: how={how!r}; it is one of 'inner', 'left', 'outer'")
    keys = list(keys)
    left_values, right_values = _values(left, keys), _values(right, keys)
    clash = set(left_values) & set(right_values)
    if clash:
        raise OperatorArgumentError(f"table_join: both sides have columns {sorted(clash)}; rename one side's")
    touched = left_changes.select(*keys).unionByName(right_changes.select(*keys)).distinct()
    left_after = _after(left, left_changes, keys, flag).withColumn("_left_row", F.lit(True))
    right_after = _after(right, right_changes, keys, flag).withColumn("_right_row", F.lit(True))
    joined = join_on_keys(join_on_keys(touched, left_after, keys, "left"), right_after, keys, "left")
    on_left, on_right = F.col("_left_row").isNotNull(), F.col("_right_row").isNotNull()
    passes = {"inner": on_left & on_right, "left": on_left, "outer": on_left | on_right}[how]
    if keep is not None:
        passes = passes & F.coalesce(keep, F.lit(False))
    rows = joined.select(*keys, *left_values, *right_values, (~passes).alias(flag))
    if result is not None:
        held = result.select(*keys).distinct().withColumn("_held", F.lit(True))
        rows = join_on_keys(rows, held, keys, "left").where(~F.col(flag) | F.col("_held").isNotNull()).drop("_held")
    return rows


def table_left_join(
    left: DataFrame,
    left_changes: DataFrame,
    right: DataFrame,
    right_changes: DataFrame,
    keys: Sequence[str],
    keep: Column | None = None,
    result: DataFrame | None = None,
    flag: str = RETRACT,
) -> DataFrame:
    """When either side changes, the affected result rows are recomputed, and rows that no longer pass are deleted.

    `table_join(..., how="left")`: `left` and `right` are the two tables as committed (one row per key),
    `left_changes` and `right_changes` the rows that replace same-key rows this run; a change row whose
    `flag` column is true removes its key from that side (so the output of one join can feed another). The
    result is `left` left-joined with `right` on `keys` (the right side's columns null where it has no row),
    filtered by `keep`. Returned: one row per key changed on either side, with the join's columns and
    `flag`: false with the recomputed row if it passes `keep` (and the left side has the key), true (a
    retraction) otherwise; when `result` (the committed result table) is given, retractions are only
    returned for keys it holds. Stage it with `batch.upsert(table, rows, delete=flag)`. The two sides'
    non-key columns must not share names. Browsers with 5 actions or more, not verified:

        requests = table_left_join(
            batch.current("browser_action_counts"), counted, batch.current("verified_browsers"), verifications,
            ["browser_hash"], keep=(F.col("actions") >= 5) & F.col("verified_at").isNull(),
            result=batch.current("captcha_requests"),
        )
        batch.upsert("captcha_requests", requests, delete=RETRACT)
    """
    return table_join(left, left_changes, right, right_changes, keys, "left", keep=keep, result=result, flag=flag)
