"""`streamtable.expect`: the quality rules a pipeline declares on its outputs (`expect.Suite`, `expect.unique`, ...).

A public namespace of the facade, as `pyspark.sql.functions` is Spark's: the rules are defined in
`core.expectations`, and no internal module imports this one.
"""

from streamtable.core.expectations import (
    Expectation,
    Suite,
    any_not_null,
    between,
    column_pair_le,
    in_set,
    not_null,
    sum_equals,
    unique,
)

__all__ = [
    "Expectation",
    "Suite",
    "any_not_null",
    "between",
    "column_pair_le",
    "in_set",
    "not_null",
    "sum_equals",
    "unique",
]
