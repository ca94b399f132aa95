"""Run a table's declared rules (`core.expectations`) as a Great Expectations 1.x suite on a Spark DataFrame.

GX on Spark costs ~40 small Spark jobs per suite, so a small frame (most outputs are aggregates) is collected
once through Arrow and validated by GX on pandas instead, with the same suite and the same results.

Each lake keeps its own GX file project, validation history and Data Docs under its `quality_dir`
(`<quality_dir>/gx/...`), so two lakes share nothing. GX is imported on the first `validate` only
(the import alone takes seconds). Validations of one lake are serialized (a process lock plus the lake's
lease `<quality_dir>/lock`, `streamtable.storage.lease`), because GX rewrites `great_expectations.yml` and keeps
the current project in a process-wide global. GX's file project is a local folder: for a lake on object storage
(`s3://`) it lives in a local cache folder of this host (`project_dir`: suites, validation history), and after each
build the Data Docs site is mirrored to `<lake>/_quality/gx/uncommitted/data_docs/local_site/` through the lake's
store, where `docs_path` points. That history is per host (a validation on another host starts its own); the
gate's verdict never depends on it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import math
import os
import re
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa

from streamtable.core.expectations import Expectation, Suite
from streamtable.quality import exact
from streamtable.storage.lease import Lease
from streamtable.storage.store import Store, is_object_store, join

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DATASOURCE = "streamtable"
ENGINES = {"spark": DATASOURCE, "pandas": f"{DATASOURCE}_pandas"}  # engine -> its GX datasource
PANDAS_MAX_ROWS = 200_000  # validate(engine=None) collects frames up to this size to pandas
# Spark types (typeName) whose values GX on pandas compares, counts and sums as GX on Spark does. Not among them:
# float (numpy compares float32 with a bound in float32, Spark in double) and decimal (GX on pandas sums it as
# floats and fails on nulls). GX stores in_set values as JSON, dates and timestamps as ISO strings, which
# Spark casts back; pandas does not for dates and is dropping it for timestamps, so such rules run in Spark.
_PANDAS_TYPES = {
    "boolean",
    "byte",
    "short",
    "integer",
    "long",
    "double",
    "string",
    "date",
    "timestamp",
    "timestamp_ntz",
}
BATCH_DEFINITION = "whole_dataframe"
SITE = "local_site"
SITE_DIR = "uncommitted/data_docs/local_site/"
RESULT_FORMAT = "SUMMARY"  # counts plus a few example values; BOOLEAN_ONLY would drop the counts
_RULE = "streamtable_rule"  # meta key on each GX expectation: the index of the declared rule
# Validation results (and their Data Docs pages) kept per suite: every batch is validated, and a serving
# pipeline's history would otherwise grow without end and slow down each Data Docs index build.
KEEP_RESULTS = int(os.environ.get("STREAMTABLE_QUALITY_KEEP", "100"))
_LOCK = threading.Lock()
log = logging.getLogger("streamtable.quality")
_CONTEXTS: dict[str, Any] = {}  # quality_dir -> its GX project, opened once per process
_CHECKPOINTS: dict[tuple, Any] = {}  # (project, suite, rules, docs, engine) -> its checkpoint, made once per process
_verdicts_only = 0  # > 0 inside `verdicts_only` (the test driver's runs)


@dataclass(frozen=True)
class Report:
    """The outcome of one validation of one output table."""

    suite: str  # "<pipeline>.<table>"
    success: bool
    failures: tuple[str, ...]  # one short human line per failed expectation
    docs_path: str | None  # the Data Docs index.html showing this validation, or None without docs
    rows: int
    page: str | None = None  # this validation's own Data Docs page (beside docs_path), or None without docs


def site_dir(quality_dir: str) -> str:
    """The folder of a lake's Data Docs site (no GX import): a local path, or the `s3://` URI of the mirrored site
    for a lake on object storage."""
    if is_object_store(quality_dir):
        return join(quality_dir, "gx", SITE_DIR.rstrip("/"))
    return str(Path(quality_dir).resolve() / "gx" / SITE_DIR)


def docs_index(quality_dir: str) -> str:
    """Where `validate` writes the Data Docs index.html of a lake's quality_dir (in `site_dir`)."""
    return f"{site_dir(quality_dir)}/index.html"


def project_dir(quality_dir: str) -> str:
    """The local folder of the lake's GX project: `quality_dir` itself for a local lake; for one on object storage
    a folder of this host's cache (`$XDG_CACHE_HOME` or ~/.cache, `streamtable/quality/<hash of the lake>`)."""
    if not is_object_store(quality_dir):
        return str(Path(quality_dir).resolve())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(cache / "streamtable" / "quality" / hashlib.sha256(quality_dir.encode()).hexdigest()[:16])


def _local_site(quality_dir: str) -> str:
    """The Data Docs site's folder in the lake's local GX project (for an s3:// lake, what is mirrored to it)."""
    return os.path.join(project_dir(quality_dir), "gx", SITE_DIR)


def _publish_docs(quality_dir: str) -> None:
    """Mirror the Data Docs site of a lake on object storage from its local project to the lake."""
    if is_object_store(quality_dir):
        Store.for_lake(quality_dir).mirror_dir(_local_site(quality_dir), join(quality_dir, "gx", SITE_DIR))


@contextmanager
def verdicts_only() -> Iterator[None]:
    """Inside the block (`streamtable.testing`'s runs) validations keep no history and build no Data Docs: the same
    GX suites and verdicts, checked in one in-memory GX project for the whole process (`_memory_context`) instead of
    each lake's file project, which GX reads its YAML from again many times a validation."""
    global _verdicts_only
    _verdicts_only += 1
    try:
        yield
    finally:
        _verdicts_only -= 1


def validate(
    df: DataFrame,
    pipeline: str,
    suite: Suite,
    quality_dir: str,
    metrics: dict[str, exact.Number] | None = None,
    build_docs: bool = True,
    engine: str | None = None,
) -> Report:
    """Validate `df` with `suite` as the GX suite `<pipeline>.<table>`; store the result (and Data Docs) in quality_dir.

    `metrics` supplies the values `sum_equals` rules reconcile against; a missing one is a ValueError.
    The frame is cached for the run unless it already is.
    `engine` picks where GX computes: "spark", "pandas" (the frame collected once, see `_to_pandas`), or
    None: pandas for frames of at most PANDAS_MAX_ROWS rows that pandas can check exactly, else Spark.
    """
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be one of {sorted(ENGINES)} or None, not {engine!r}")
    build_docs = build_docs and not _verdicts_only
    params = _parameters(suite.expectations, metrics or {})
    cache = not df.is_cached
    if cache:
        df.persist()
    try:
        rows = df.count()
        frame = None
        if engine == "pandas" or (engine is None and rows <= PANDAS_MAX_ROWS):
            frame = _to_pandas(df, None if engine == "pandas" else suite.expectations)
        return _check(df if frame is None else frame, pipeline, suite, quality_dir, params, build_docs, rows)
    finally:
        if cache:
            df.unpersist()


def validate_rows(
    rows: pa.Table,
    spark: SparkSession,
    pipeline: str,
    suite: Suite,
    quality_dir: str,
    sums: dict[int, tuple[exact.Number, exact.Number]],
) -> Report:
    """Validate some rows of a table (see `runtime.batch.gate`) with `suite`, without Data Docs; in pandas when exact.

    `sums` gives each sum_equals rule (by its index in the suite) the sum the rows must have and what the table's
    sum adds to theirs: a failure is reported with the table's sum and the metric's total.
    """
    frame = _arrow_to_pandas(rows, suite.expectations, spark.conf.get("spark.sql.session.timeZone") or "UTC")
    data = spark.createDataFrame(rows) if frame is None else frame
    params = {_parameter(i, suite.expectations[i]): expected for i, (expected, _) in sums.items()}
    offsets = {i: offset for i, (_, offset) in sums.items()}
    return _check(data, pipeline, suite, quality_dir, params, False, rows.num_rows, offsets)


def _check(
    data: Any,
    pipeline: str,
    suite: Suite,
    quality_dir: str,
    params: dict[str, exact.Number],
    build_docs: bool,
    rows: int,
    offsets: dict[int, exact.Number] | None = None,
) -> Report:
    """Run the suite on a Spark or pandas frame through its (cached) GX checkpoint and report the failed rules."""
    name = f"{pipeline}.{suite.table}"
    engine = "pandas" if _is_pandas(data) else "spark"
    with _locked(quality_dir):
        if _verdicts_only:
            ctx, build_docs = _memory_context(), False
        else:
            ctx = _context(quality_dir)
            prune_results(quality_dir, name, KEEP_RESULTS - 1)  # before the run: the new index lists what is kept
        gx_params = _gx_parameters(suite.expectations, params, offsets or {})
        result = _run_checkpoint(ctx, name, suite.expectations, build_docs, engine, data, gx_params)
        docs = page = None
        if build_docs:
            _publish_docs(quality_dir)
            docs = docs_index(quality_dir) if is_object_store(quality_dir) else _docs_path(ctx)
            page = _page_path(ctx, next(iter(result.run_results)), quality_dir)
    (validation,) = result.run_results.values()
    failed = sorted((r for r in validation.results if not r.success), key=lambda r: r.expectation_config.meta[_RULE])
    failures = tuple(
        _failure(
            suite.table,
            suite.expectations[index],
            r.result,
            r.exception_info,
            params.get(_parameter(index, suite.expectations[index])),
            (offsets or {}).get(index, 0),
        )
        for r in failed
        for index in [r.expectation_config.meta[_RULE]]
    )
    log.info(
        "suite %s %s on %d rows%s",
        name,
        "passed" if result.success else "FAILED",
        rows,
        "".join(f"; {f}" for f in failures),
    )
    return Report(suite=name, success=bool(result.success), failures=failures, docs_path=docs, rows=rows, page=page)


def _is_pandas(data: Any) -> bool:
    return type(data).__module__.startswith("pandas")


def _to_pandas(df: DataFrame, rules: tuple[Expectation, ...] | None) -> Any:
    """`df` collected in one Spark job (through Arrow) as a pandas frame on which GX checks rules as on Spark.

    Given `rules`, None (validate in Spark) unless GX on pandas checks them exactly as on Spark: every column
    has a type of _PANDAS_TYPES (and see `_arrow_to_pandas`).
    """
    types = {f.name: f.dataType.typeName() for f in df.schema.fields}
    if rules is not None and not set(types.values()) <= _PANDAS_TYPES:
        return None
    return _arrow_to_pandas(df.toArrow(), rules, df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC")


def _arrow_to_pandas(table: pa.Table, rules: tuple[Expectation, ...] | None, zone: str) -> Any:
    """An Arrow table as a pandas frame on which GX checks rules as on Spark (see `_to_pandas`).

    Unlike `df.toPandas()`, integer and boolean columns keep their type when they hold nulls (nullable
    Int*/boolean, not float64, which rounds longs beyond 2**53, or object); like it, timestamps become naive
    datetime64[ns] in the session time zone and dates datetime.date. Given `rules`, None (validate in Spark)
    when GX on pandas would not check them as on Spark: an in_set rule reads a date or timestamp, or a double
    is NaN (Spark: a value above every number; pandas: a null).
    """
    import pandas as pd
    import pyarrow.compute as pc

    temporal = {f.name for f in table.schema if pa.types.is_temporal(f.type)}
    if rules is not None and (
        any(r.kind == "in_set" and r.columns[0] in temporal for r in rules)
        or any(pa.types.is_floating(c.type) and pc.any(pc.is_nan(c)).as_py() for c in table.columns)
    ):
        return None
    nullable = {
        pa.bool_(): pd.BooleanDtype(),
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
    }
    frame = table.to_pandas(types_mapper=nullable.get, date_as_object=True, coerce_temporal_nanoseconds=True)
    for i, dtype in enumerate(frame.dtypes):
        if isinstance(dtype, pd.DatetimeTZDtype):
            frame.isetitem(i, frame.iloc[:, i].dt.tz_convert(zone).dt.tz_localize(None))
    return frame


def build_docs(quality_dir: str) -> str:
    """Bring the lake's Data Docs up to date: the pages of stored validation results that have none yet (the gates')
    and the index are built, pages already built are left alone (a run renders its own, not the history); return the
    index path."""
    with _locked(quality_dir):
        ctx = _context(quality_dir)
        site = _local_site(quality_dir)
        missing = _results_without_pages(ctx, site)
        if missing or not os.path.isfile(os.path.join(site, "index.html")):
            ctx.build_data_docs(site_names=[SITE], resource_identifiers=missing or None)
            _publish_docs(quality_dir)
    return docs_index(quality_dir)


def _results_without_pages(ctx: Any, site: str) -> list[Any]:
    """The stored validation results whose page is not in the local Data Docs `site` folder (a file listing each).

    GX files a result as `<suite as path>/<run name>/<run time>/<batch>.json` and its page under the same path.
    """
    pages = os.path.join(site, "validations")
    return [
        key
        for key in ctx.validation_results_store.list_keys()
        if not os.path.isfile(os.path.join(pages, *key.to_tuple()) + ".html")
    ]


def import_gx_in_background() -> None:
    """Start importing Great Expectations on a daemon thread, so that its seconds of imports overlap the JVM's start."""
    threading.Thread(target=_gx, name="import-great-expectations", daemon=True).start()


# Modules GX imports when it is imported, for expectations streamtable never declares (the KL-divergence
# expectation's charts: altair; its and the KS tests' statistics: scipy.stats): 1.3 of the ~4 CPU-s of importing GX,
# paid by every driver. They are imported the first time GX uses them instead.
IMPORTED_ON_FIRST_USE = ("altair", "scipy.stats")
_first_use = threading.RLock()  # re-entered if one module imported on first use imports another


class _ImportedOnFirstUse(types.ModuleType):
    """A stand-in in `sys.modules` that imports the module it stands for, and gives it its place, the first time an
    attribute of it is read."""

    def __getattr__(self, attr: str) -> Any:
        with _first_use:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            module = importlib.import_module(self.__name__)
        return getattr(module, attr)


def _import_on_first_use(names: tuple[str, ...]) -> None:
    """Put a stand-in in `sys.modules` for each module of `names` that is installed and not imported yet."""
    for name in names:
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            sys.modules[name] = _ImportedOnFirstUse(name)


@lru_cache(maxsize=1)
def _gx() -> Any:
    """The great_expectations module, imported once with analytics off and its logs at WARNING."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    _import_on_first_use(IMPORTED_ON_FIRST_USE)
    import great_expectations

    log = logging.getLogger("great_expectations")
    if log.level == logging.NOTSET:
        log.setLevel(logging.WARNING)
    return great_expectations


EXACT_SUM = "column.streamtable_exact_sum"  # the GX metric `sum_equals` checks (`_null_safe_sum`)


@lru_cache(maxsize=1)
def _null_safe_sum() -> type:
    """ExpectColumnSumToBeBetween made the check of `sum_equals`: the column's sum equals `total` (a parameter, the
    exact text of the metric's total), exactly, or for DOUBLE and FLOAT columns up to `quality.exact`'s rounding.

    GX's own `column.sum` goes through floats (pandas sums decimals as floats; on Spark 4 it sums integers as doubles)
    and its bounds are floats, so it could pass 0.6 for 0 or fail 1234567891358044.96: this sums the column exactly
    (`EXACT_SUM`: Spark's decimal sum, integers as DECIMAL(38, 0), Python's Decimal on pandas) and compares with the
    exact total. An empty (or all-null) column sums to 0 (Spark's SUM over no values is NULL). The bounds
    (`min_value`, `max_value`) are the total as a float, for the Data Docs.
    """

    _gx()  # analytics off and logs at WARNING before GX is used
    from great_expectations.execution_engine import PandasExecutionEngine, SparkDFExecutionEngine
    from great_expectations.expectations import ExpectColumnSumToBeBetween
    from great_expectations.expectations.metrics.column_aggregate_metric_provider import (
        ColumnAggregateMetricProvider,
        column_aggregate_partial,
        column_aggregate_value,
    )
    from pyspark.sql import functions as F

    class ColumnStreamtableExactSum(ColumnAggregateMetricProvider):
        """(the sum: exact text, or a float for a DOUBLE or FLOAT column; the sum of absolute values or None; the
        relative tolerance of the column's type). Text, as GX turns a Decimal a metric gives into a float."""

        metric_name = EXACT_SUM
        filter_column_isnull = True

        @column_aggregate_value(engine=PandasExecutionEngine)
        def _pandas(cls, column: Any, **kwargs: Any) -> tuple:
            if column.dtype.kind == "f":
                values = column.to_numpy(dtype="float64")
                tolerance = exact.relative_tolerance("float" if column.dtype.itemsize == 4 else "double")
                return math.fsum(values), math.fsum(abs(values)), tolerance
            return exact.text(exact.add(*(exact.exact(v, finite=False) for v in column))), None, 0.0

        @column_aggregate_partial(engine=SparkDFExecutionEngine)
        def _spark(cls, column: Any, _table: Any = None, _column_name: Any = None, **kwargs: Any) -> Any:
            kind = _table.schema[_column_name].dataType.typeName() if _table is not None else "decimal"
            tolerance = exact.relative_tolerance(kind)
            if tolerance:
                return F.struct(F.sum(column), F.sum(F.abs(column)), F.lit(tolerance))
            summed = column.cast("decimal(38,0)") if kind in ("byte", "short", "integer", "long") else column
            return F.struct(F.sum(summed).cast("string"), F.lit(None).cast("double"), F.lit(0.0))

    class ExpectColumnNullSafeSumToBeBetween(ExpectColumnSumToBeBetween):
        total: str | dict | None = None  # the exact expected sum, as `exact.text`
        scale: float | dict | None = None  # the magnitude the sum's floating-point rounding is relative to

        metric_dependencies = (EXACT_SUM,)
        success_keys = (*ExpectColumnSumToBeBetween.success_keys, "total", "scale")
        args_keys = (*ExpectColumnSumToBeBetween.args_keys, "total", "scale")

        def _validate(
            self, metrics: dict, runtime_configuration: dict | None = None, execution_engine: Any = None
        ) -> dict:
            observed, absolute, tolerance = tuple(metrics[EXACT_SUM])
            observed = exact.number(observed) if isinstance(observed, str) else exact.exact(observed, finite=False)
            expected = exact.number(self.total) if isinstance(self.total, str) else exact.exact(self.min_value)
            scale = max(float(self.scale or 0), float(absolute or 0))  # type: ignore[arg-type]
            shown = observed if isinstance(observed, int) else float(observed)
            return {
                "success": exact.approximately_equal(observed, expected, tolerance, scale),
                "result": {"observed_value": shown, "details": {"exact_sum": exact.text(observed)}},
            }

    return ExpectColumnNullSafeSumToBeBetween


def _parameter(index: int, rule: Expectation) -> str:
    """The GX suite-parameter name of the sum a sum_equals rule expects (parsed as an expression: no dots)."""
    return f"rule{index}_" + re.sub(r"\W", "_", rule.metric or "")


def reconciled_metrics(rules: tuple[Expectation, ...], metrics: dict[str, exact.Number]) -> dict[int, exact.Number]:
    """The value in `metrics` of each sum_equals rule's metric, by the rule's index; ValueError if one is missing."""
    values: dict[int, exact.Number] = {}
    for index, rule in enumerate(rules):
        if rule.kind != "sum_equals":
            continue
        if rule.metric not in metrics:
            raise ValueError(
                f"sum_equals({rule.columns[0]}) needs metric {rule.metric!r}, "
                f"which this run did not report (has: {sorted(metrics)})"
            )
        values[index] = metrics[rule.metric]
    return values


def _parameters(rules: tuple[Expectation, ...], metrics: dict[str, exact.Number]) -> dict[str, exact.Number]:
    """The sums the sum_equals rules expect (by parameter name), taken from this run's metrics."""
    return {_parameter(i, rules[i]): value for i, value in reconciled_metrics(rules, metrics).items()}


def _gx_parameters(
    rules: tuple[Expectation, ...], sums: dict[str, exact.Number], offsets: dict[int, exact.Number]
) -> dict[str, Any]:
    """GX's suite parameters for the sums the sum_equals rules expect (`sums`, by parameter name), the rows checked
    being the table but for rows that add `offsets[rule]`: each sum as a float (the bounds, for the Data Docs), as
    exact text (`total`) and the magnitude its rounding is relative to (`scale`: the total's and the offset's)."""
    params: dict[str, Any] = {}
    for index, rule in enumerate(rules):
        name = _parameter(index, rule)
        if rule.kind != "sum_equals" or name not in sums:
            continue
        value, offset = sums[name], offsets.get(index, 0)
        params[name] = float(value)
        params[f"{name}_total"] = exact.text(value)
        params[f"{name}_scale"] = max(abs(float(exact.add(value, offset))), abs(float(offset)))
    return params


def _gx_expectation(rule: Expectation, index: int) -> Any:
    """The GX 1.x expectation that checks one declared rule."""
    gxe = _gx().expectations
    c, meta = rule.columns, {_RULE: index}
    mostly = {"mostly": rule.mostly, "meta": meta}
    if rule.kind == "not_null" or (rule.kind == "any_not_null" and len(c) == 1):
        return gxe.ExpectColumnValuesToNotBeNull(column=c[0], **mostly)
    if rule.kind == "unique":
        if len(c) == 1:
            return gxe.ExpectColumnValuesToBeUnique(column=c[0], **mostly)
        return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(c), **mostly)
    if rule.kind == "between":
        return gxe.ExpectColumnValuesToBeBetween(
            column=c[0], min_value=rule.min_value, max_value=rule.max_value, **mostly
        )
    if rule.kind == "in_set":
        return gxe.ExpectColumnValuesToBeInSet(column=c[0], value_set=list(rule.value_set), **mostly)
    if rule.kind == "sum_equals":
        name = _parameter(index, rule)
        bound, total, scale = ({"$PARAMETER": f"{name}{part}"} for part in ("", "_total", "_scale"))
        return _null_safe_sum()(column=c[0], min_value=bound, max_value=bound, total=total, scale=scale, meta=meta)
    if rule.kind == "column_pair_le":  # left <= right  <=>  right >= left; rows with a null are skipped
        return gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A=c[1], column_B=c[0], or_equal=True, ignore_row_if="either_value_is_missing", **mostly
        )
    if rule.kind == "any_not_null":  # where all but the last are null, the last must not be
        # (a row condition, not UnexpectedRowsExpectation: that one works on Spark but takes no `mostly`
        # and registers the frame as the session-wide temp view "tmp_view"; here `mostly` counts among
        # the rows where the others are null)
        from great_expectations.expectations.row_conditions import AndCondition, Column, Condition

        nulls: list[Condition] = [Column(name).is_null() for name in c[:-1]]
        condition = nulls[0] if len(nulls) == 1 else AndCondition(conditions=nulls)
        return gxe.ExpectColumnValuesToNotBeNull(column=c[-1], row_condition=condition, **mostly)
    raise ValueError(f"unknown expectation kind {rule.kind!r}")


def _gx_suite(name: str, rules: tuple[Expectation, ...]) -> Any:
    """A GX ExpectationSuite holding the declared rules, in order."""
    return _gx().ExpectationSuite(name=name, expectations=[_gx_expectation(r, i) for i, r in enumerate(rules)])


@contextmanager
def _locked(quality_dir: str) -> Iterator[None]:
    """Hold this process's GX lock and the lake's quality lease."""
    with _LOCK, Lease(Store.for_lake(quality_dir), join(quality_dir, "lock"), "validate"):
        yield


def _context(quality_dir: str) -> Any:
    """The lake's file-mode GX project, opened once per process and made GX's current project."""
    from great_expectations.data_context.data_context.context_factory import set_context

    key = project_dir(quality_dir)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = _open_context(key)
    set_context(_CONTEXTS[key])
    return _CONTEXTS[key]


@lru_cache(maxsize=1)
def _ephemeral_context() -> Any:
    """The process's in-memory GX project (`verdicts_only`), with analytics and progress bars off."""
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    _null_safe_sum()
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.analytics_enabled = False
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx


def _memory_context() -> Any:
    """`_ephemeral_context`, made GX's current project; its validation results dropped (no history is kept)."""
    from great_expectations.data_context.data_context.context_factory import set_context

    ctx = _ephemeral_context()
    set_context(ctx)
    ctx.validation_results_store.store_backend._store.clear()
    return ctx


def _open_context(project: str) -> Any:
    """The lake's file-mode GX project (created on first use), with analytics and progress bars off."""
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    _null_safe_sum()  # register the custom type before GX reads a stored suite or result that uses it
    ctx = gx.get_context(mode="file", project_root_dir=project)
    bars = ctx.variables.progress_bars  # a ProgressBarsConfig when set here, a dict once read back from the yml
    bars = {} if bars is None else bars if isinstance(bars, dict) else vars(bars)
    bars_on = any(bars.get(k, True) for k in ("globally", "metric_calculations"))
    if ctx.variables.analytics_enabled is not False or bars_on:
        ctx.variables.analytics_enabled = False
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        ctx.variables.save()
    if SITE not in ctx.list_data_docs_sites():
        ctx.add_data_docs_site(
            SITE,
            {
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": SITE_DIR},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    return ctx


def _run_checkpoint(
    ctx: Any, name: str, rules: tuple[Expectation, ...], build_docs: bool, engine: str, data: Any, params: dict
) -> Any:
    """Run the checkpoint validating `rules` as suite `name` on the engine, made once per process.

    A checkpoint whose suite or definitions were saved again since it was made (by another engine's checkpoint
    of the same suite, or by another process) is made again.
    """
    from great_expectations.exceptions.resource_freshness import ResourceFreshnessAggregateError

    key = (id(ctx), name, rules, build_docs, engine)
    try:
        return _checkpoint(key, ctx).run(batch_parameters={"dataframe": data}, expectation_parameters=params)
    except ResourceFreshnessAggregateError:
        del _CHECKPOINTS[key]
        return _checkpoint(key, ctx).run(batch_parameters={"dataframe": data}, expectation_parameters=params)


def _checkpoint(key: tuple, ctx: Any) -> Any:
    _, name, rules, build_docs, engine = key
    if key not in _CHECKPOINTS:
        _CHECKPOINTS[key] = _new_checkpoint(ctx, name, _gx_suite(name, rules), build_docs, engine)
    return _CHECKPOINTS[key]


def _new_checkpoint(ctx: Any, name: str, suite: Any, build_docs: bool, engine: str) -> Any:
    """Get-or-create the engine's datasource, asset, batch definition; add-or-update suite, validation, checkpoint."""
    gx = _gx()
    source = ENGINES[engine]
    try:
        datasource = ctx.data_sources.get(source)
    except KeyError:  # add_or_update_* would drop every existing asset
        datasource = (
            ctx.data_sources.add_spark(source, persist=False)
            if engine == "spark"
            else ctx.data_sources.add_pandas(source)
        )
    try:
        asset = datasource.get_asset(name)
    except LookupError:
        asset = datasource.add_dataframe_asset(name)
    try:
        batch = asset.get_batch_definition(BATCH_DEFINITION)
    except KeyError:
        batch = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)
    suite = ctx.suites.add_or_update(suite)
    validation = ctx.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    actions = [gx.checkpoint.UpdateDataDocsAction(name="update_data_docs", site_names=[SITE])] if build_docs else []
    return ctx.checkpoints.add_or_update(
        gx.Checkpoint(name=name, validation_definitions=[validation], actions=actions, result_format=RESULT_FORMAT)
    )


def prune_results(quality_dir: str, suite: str, keep: int = KEEP_RESULTS) -> int:
    """Delete all but the newest `keep` validation results of `suite` and their Data Docs pages; return how many went.

    GX files a result under `<suite as path>/<run name>/<run time>/`; run times sort as they happened.
    """
    removed = 0
    project = project_dir(quality_dir)
    files = Store.for_lake(project)
    for store in ("uncommitted/validations", SITE_DIR + "validations"):
        folder = join(project, "gx", store, *suite.split("."))
        runs = sorted(
            (
                join(folder, name, when)
                for name in files.children(folder)
                for when in files.children(join(folder, name))
            ),
            key=lambda p: p.rsplit("/", 1)[-1],
        )
        for run in runs[: max(0, len(runs) - keep)]:
            files.delete_prefix(run)
            removed += store.startswith("uncommitted/validations")
    return removed


def _docs_path(ctx: Any, **resource: Any) -> str | None:
    """The local path of a page of the site (its index.html without `resource`), or None if it was not built."""
    for site in ctx.get_docs_sites_urls(site_name=SITE, **resource):
        url = site.get("site_url")
        if url and url.startswith("file://"):
            return unquote(urlparse(url).path)
    return None


def _page_path(ctx: Any, validation: Any, quality_dir: str) -> str | None:
    """Where the Data Docs page of one validation result is: a local path, or its URI in a lake on object storage."""
    local = _docs_path(ctx, resource_identifier=validation, only_if_exists=False)
    return None if local is None else f"{site_dir(quality_dir)}/{local.partition(SITE_DIR)[2]}"


def _count(n: int, noun: str = "row") -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _rows(rule: Expectation, result: dict, noun: str = "row") -> str:
    """How many rows broke a rule, with the allowed share when the rule has `mostly`."""
    text = _count(int(result.get("unexpected_count") or 0), noun)
    if rule.mostly < 1.0 and result.get("unexpected_percent") is not None:
        text += f", {result['unexpected_percent']:.2f}% > allowed {100 * (1 - rule.mostly):.2f}%"
    return text


def _examples(result: dict) -> str:
    values = result.get("partial_unexpected_list") or []
    shown = ", ".join(repr(v) for v in dict.fromkeys(map(_hashable, values)))[:80]
    return f", e.g. {shown}" if values else ""


def _hashable(value: Any) -> Any:
    """An example value as GX on Spark reports it (pandas gives numpy scalars and Timestamps), lists as tuples."""
    if isinstance(value, list):
        return tuple(value)
    for plain in ("to_pydatetime", "item"):  # pandas Timestamp, numpy scalar
        if hasattr(value, plain):
            return getattr(value, plain)()
    return value


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _error(exception_info: dict | None) -> str | None:
    """The first exception message GX recorded for an expectation, if it raised."""
    infos = [exception_info or {}]
    infos += [v for v in (exception_info or {}).values() if isinstance(v, dict)]
    for info in infos:
        if info.get("raised_exception"):
            return str(info.get("exception_message") or "error").splitlines()[0]
    return None


def _failure(
    table: str,
    rule: Expectation,
    result: dict,
    exception_info: dict | None,
    expected: exact.Number | None,
    offset: exact.Number,
) -> str:
    """One short human line for a failed rule (a sum_equals rule's sums shown plus `offset`)."""
    cols = ", ".join(rule.columns)
    error = _error(exception_info)
    if error:
        return f"{table}: {rule.kind}({cols}) could not be checked: {error}"
    rows = _rows(rule, result)
    if rule.kind == "not_null":
        return f"{table}: {cols} has nulls ({rows})"
    if rule.kind == "unique":
        what = cols if len(rule.columns) == 1 else f"({cols})"
        return f"{table}: {what} is not unique ({_rows(rule, result, 'duplicate row')})"
    if rule.kind == "between":
        lo, hi = rule.min_value, rule.max_value
        bounds = (
            f"between {lo} and {hi}"
            if lo is not None and hi is not None
            else f">= {lo}"
            if lo is not None
            else f"<= {hi}"
        )
        return f"{table}: {cols} is not {bounds} ({rows}{_examples(result)})"
    if rule.kind == "in_set":
        return f"{table}: {cols} has values outside {list(rule.value_set)} ({rows}{_examples(result)})"
    if rule.kind == "sum_equals":
        exact_sum = (result.get("details") or {}).get("exact_sum")
        observed = result.get("observed_value") if exact_sum is None else exact.number(exact_sum)
        shown = _number(observed if observed is None else exact.add(exact.exact(observed, finite=False), offset))
        total = None if expected is None else exact.add(expected, offset)
        return f"{table}: sum of {cols} is {shown}, but metric {rule.metric} is {total}"
    if rule.kind == "column_pair_le":
        return f"{table}: {rule.columns[0]} > {rule.columns[1]} ({rows})"
    if rule.kind == "any_not_null":
        return f"{table}: {cols} are all null ({rows})"
    return f"{table}: {rule.kind}({cols}) failed"
