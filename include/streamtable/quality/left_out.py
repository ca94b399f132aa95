"""What GX would count of the rows of a batch it was not given, so that a screened batch's results count the batch.

When the gate gives GX only the rows that could break a rule (`quality.screen`), GX counts those rows: its
`element_count`, `missing_count` and percentages would describe a few rows as if they were the batch. The rows left
out pass every rule and hold no NaN where a rule reads them (the screen keeps those), so what GX counts of them is
what Arrow counts of their nulls, on either engine: `LeftOut` adds it up chunk by chunk, and `count_whole` adds it
to GX's result of each rule, which then says what GX says of the whole batch (the unexpected rows are all among
those GX checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamtable.core.expectations import Expectation


@dataclass(frozen=True)
class LeftOut:
    """The rows GX was not given: how many (`rows`), and what GX would count of them for each rule (by its index
    in the suite): (element_count, missing_count)."""

    rows: int = 0
    counts: dict[int, tuple[int, int]] = field(default_factory=dict)

    def plus(self, rows: pa.Table, rules: Sequence[Expectation]) -> LeftOut:
        """These counts with those of more `rows` left out (rows that pass every rule)."""
        if not rows.num_rows:
            return self
        counts = dict(self.counts)
        for index, (elements, missing) in gx_counts(rows, rules).items():
            before = counts.get(index, (0, 0))
            counts[index] = (before[0] + elements, before[1] + missing)
        return LeftOut(self.rows + rows.num_rows, counts)

    def statement(self, checked_by_gx: int) -> str:
        """What was checked, in words, for a validation that GX ran on `checked_by_gx` rows and these left out."""
        total = checked_by_gx + self.rows
        return (
            f"checked {total:,} rows; {checked_by_gx:,} of them could break a rule and went through GX "
            f"(the other {self.rows:,} pass every rule)"
        )


def gx_counts(rows: pa.Table, rules: Sequence[Expectation]) -> dict[int, tuple[int, int]]:
    """What GX counts of `rows` (none of them NaN where a rule reads it) for each rule that counts rows, by index:
    (element_count: the rows it reads, missing_count: those it skips as missing; 0 where GX reports none)."""
    counts = {}
    for index, rule in enumerate(rules):
        if rule.kind == "sum_equals":
            continue
        nulls = [_nulls(rows[c]) for c in rule.columns]
        if rule.kind == "any_not_null" and len(nulls) > 1:  # checked where all but the last are null
            counts[index] = (int(np.logical_and.reduce(nulls[:-1]).sum()), 0)
        elif rule.kind in ("not_null", "any_not_null"):  # GX counts no missing values of a null check
            counts[index] = (rows.num_rows, 0)
        elif rule.kind == "column_pair_le":  # a row with a null on either side is skipped
            counts[index] = (rows.num_rows, int(np.logical_or.reduce(nulls).sum()))
        else:  # a row whose columns are all null is skipped (one column: its nulls)
            counts[index] = (rows.num_rows, int(np.logical_and.reduce(nulls).sum()))
    return counts


def _nulls(column: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.is_null(column).to_numpy(zero_copy_only=False), dtype=bool)


def count_whole(result: dict, left_out: tuple[int, int]) -> None:
    """Add to one rule's GX `result` (GX's SUMMARY fields of a map expectation) what GX would count of the rows left
    out (`left_out`: (element_count, missing_count)), its percentages computed as GX computes them."""
    if "element_count" not in result:
        return
    elements = result["element_count"] + left_out[0]
    unexpected = result.get("unexpected_count") or 0
    total = unexpected / elements * 100 if elements > 0 else None
    result["element_count"] = elements
    if "missing_count" not in result:
        result["unexpected_percent"] = total
        return
    missing = result["missing_count"] + left_out[1]
    present = elements - missing
    share = unexpected / present * 100 if present > 0 else None
    result |= {
        "missing_count": missing,
        "missing_percent": missing / elements * 100 if elements > 0 else None,
        "unexpected_percent_total": total,
        "unexpected_percent_nonmissing": share,
        "unexpected_percent": share,
    }
