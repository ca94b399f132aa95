"""Table-table left join with retraction (Kafka's KTable-KTable leftJoin, then filter, kept as a table)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, functions as F

from streamtable.core.errors import OperatorArgumentError

RETRACT = "_retract"  # the flag column of the rows this returns: true removes the key from the result


def _after(current: DataFrame, changes: DataFrame, keys: Sequence[str], flag: str) -> DataFrame:
    """A side's content once its changes apply: changed keys take the change's row, or vanish where it is flagged."""
    deleted = F.col(flag) if flag in changes.columns else F.lit(False)
    kept = current.join(changes.select(*keys), list(keys), "left_anti")
    return kept.unionByName(changes.where(~deleted).select(*current.columns))


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

    `left` and `right` are the two tables as committed (one row per key), `left_changes` and
    `right_changes` the rows that replace same-key rows this run; a change row whose `flag` column is
    true removes its key from that side (so the output of one join can feed another). The result is
    `left` left-joined with `right` on `keys` (the right side's columns null where it has no row),
    filtered by `keep`. Returned: one row per key changed on either side, with the join's columns
    and `flag`: false with the recomputed row if it passes `keep` (and the left side has the key),
    true (a retraction) otherwise; when `result` (the committed result table) is given, retractions
    are only returned for keys it holds. Stage it with `batch.upsert(table, rows, delete=flag)`.
    The two sides' non-key columns must not share names. Browsers with 5 actions or more, not verified:

        requests = table_left_join(
            batch.current("browser_action_counts"), counted, batch.current("verified_browsers"), verifications,
            ["browser_hash"], keep=(F.col("actions") >= 5) & F.col("verified_at").isNull(),
            result=batch.current("captcha_requests"),
        )
        batch.upsert("captcha_requests", requests, delete=RETRACT)
    """
    keys = list(keys)
    left_values = [c for c in left.columns if c not in keys]
    right_values = [c for c in right.columns if c not in keys]
    clash = set(left_values) & set(right_values)
    if clash:
        raise OperatorArgumentError(f"table_left_join: both sides have columns {sorted(clash)}; rename one side's")
    touched = left_changes.select(*keys).unionByName(right_changes.select(*keys)).distinct()
    joined = touched.join(
        _after(left, left_changes, keys, flag).withColumn("_left_row", F.lit(True)), keys, "left"
    ).join(_after(right, right_changes, keys, flag), keys, "left")
    passes = F.col("_left_row").isNotNull()
    if keep is not None:
        passes = passes & F.coalesce(keep, F.lit(False))
    rows = joined.select(*keys, *left_values, *right_values, (~passes).alias(flag))
    if result is not None:
        held = result.select(*keys).distinct().withColumn("_held", F.lit(True))
        rows = rows.join(held, keys, "left").where(~F.col(flag) | F.col("_held").isNotNull()).drop("_held")
    return rows
