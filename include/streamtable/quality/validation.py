"""Run a table's declared rules (`core.expectations`) as a Great Expectations 1.x suite on a Spark DataFrame (or on
pandas, `quality.pandas_frames`), through a checkpoint made once per process, and report the failed rules.

Each lake keeps its own GX file project, validation history and Data Docs under its `quality_dir`
(`<quality_dir>/gx/...`, `quality.project`), so two lakes share nothing. GX is imported on the first `validate` only
(the import alone takes seconds, `quality.gx_import`). After each build the Data Docs site of a lake on object
storage is mirrored to the lake (`quality.docs_site`), where `docs_path` points. The validation history of such a
lake is per host (a validation on another host starts its own); the gate's verdict never depends on it.
"""

from __future__ import annotations

import html
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamtable.core.expectations import Suite
from streamtable.quality import exact, explain_rows
from streamtable.quality.docs_site import docs_index, docs_path, page_path, publish
from streamtable.quality.exact_sum import show_table_sum
from streamtable.quality.gx_import import gx
from streamtable.quality.left_out import LeftOut, count_whole
from streamtable.quality.messages import failure, with_explain
from streamtable.quality.pandas_frames import arrow_to_pandas, is_pandas, to_pandas
from streamtable.quality.project import SITE, context, locked, memory_context, prune_results
from streamtable.quality.rules import RULE, gx_parameters, gx_suite, parameter, parameters
from streamtable.storage.store import is_object_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DATASOURCE = "streamtable"
ENGINES = {"spark": DATASOURCE, "pandas": f"{DATASOURCE}_pandas"}  # engine -> its GX datasource
PANDAS_MAX_ROWS = 200_000  # validate(engine=None) collects frames up to this size to pandas
BATCH_DEFINITION = "whole_dataframe"
# Validation results (and their Data Docs pages) kept per suite: every batch is validated, and a serving
# pipeline's history would otherwise grow without end and slow down each Data Docs index build.
KEEP_RESULTS = int(os.environ.get("STREAMTABLE_QUALITY_KEEP", "100"))
log = logging.getLogger("streamtable.quality")
_CHECKPOINTS: dict[tuple, Any] = {}  # (project, suite, rules, engine) -> its checkpoint, made once per process
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


@contextmanager
def verdicts_only() -> Iterator[None]:
    """Inside the block (`streamtable.testing`'s runs) validations keep no history and build no Data Docs: the same
    GX suites and verdicts, checked in one in-memory GX project for the whole process
    (`quality.project.memory_context`) instead of each lake's file project, which GX reads its YAML from again many
    times a validation."""
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
    name_rows: bool = True,
) -> Report:
    """Validate `df` with `suite` as the GX suite `<pipeline>.<table>`; store the result (and Data Docs) in quality_dir.

    `metrics` supplies the values `sum_equals` rules reconcile against; a missing one is a ValueError.
    The frame is cached for the run unless it already is.
    `engine` picks where GX computes: "spark", "pandas" (the frame collected once, `quality.pandas_frames`), or None:
    pandas for frames of at most PANDAS_MAX_ROWS rows that pandas can check exactly, else Spark.
    `name_rows=False` leaves out the explain commands of a failed rule's rows: for rows explain cannot reach (a
    reprocess's shadow tables, dropped when refused), `streamtable explain TABLE KEY` would show the live row instead.
    """
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be one of {sorted(ENGINES)} or None, not {engine!r}")
    build_docs = build_docs and not _verdicts_only
    params = parameters(suite.expectations, metrics or {})
    cache = not df.is_cached
    if cache:
        df.persist()
    try:
        rows = df.count()
        frame = None
        if engine == "pandas" or (engine is None and rows <= PANDAS_MAX_ROWS):
            frame = to_pandas(df, None if engine == "pandas" else suite.expectations)
        data = df if frame is None else frame
        return _check(data, pipeline, suite, quality_dir, params, build_docs, (rows, LeftOut()), name_rows=name_rows)
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
    first: pa.Table | None = None,
    left_out: LeftOut | None = None,
    name_rows: bool = True,
) -> Report:
    """Validate some rows of a table (see `runtime.batch.gate`) with `suite`, without Data Docs; in pandas when exact.

    `sums` gives each sum_equals rule (by its index in the suite) the sum the rows must have and what the table's
    sum adds to theirs: a failure is reported with the table's sum and the metric's total. The rows may be those of
    a batch that could break a rule (`quality.screen`): then `first` are the batch's first rows, which a sum that
    breaks names, and `left_out` the batch's other rows, which the report, the stored result and its Data Docs page
    count with GX's (`quality.left_out`); `name_rows` as for `validate`.
    """
    frame = arrow_to_pandas(rows, suite.expectations, spark.conf.get("spark.sql.session.timeZone") or "UTC")
    # one chunk: PySpark 4.1 drops the rows after an empty record batch of an Arrow table (its second one)
    data = spark.createDataFrame(rows.combine_chunks()) if frame is None else frame
    params = {parameter(i, suite.expectations[i]): expected for i, (expected, _) in sums.items()}
    offsets = {i: offset for i, (_, offset) in sums.items()}
    checked = (rows if first is None else first).slice(0, explain_rows.SHOWN)  # a sum that breaks names them
    given = (rows.num_rows, left_out or LeftOut())
    return _check(data, pipeline, suite, quality_dir, params, False, given, offsets, checked, name_rows)


def _check(
    data: Any,
    pipeline: str,
    suite: Suite,
    quality_dir: str,
    params: dict[str, exact.Number],
    build_docs: bool,
    rows: tuple[int, LeftOut],
    offsets: dict[int, exact.Number] | None = None,
    checked: pa.Table | None = None,
    name_rows: bool = True,
) -> Report:
    """Run the suite on a Spark or pandas frame (of `rows`: (its rows, the rows of the batch left out)) through its
    (cached) GX checkpoint and report the failed rules, each with the explain commands of the rows it names (of the
    `checked` rows for a sum; none without `name_rows`) on its line and its page."""
    name = f"{pipeline}.{suite.table}"
    engine = "pandas" if is_pandas(data) else "spark"
    offsets, left_out = offsets or {}, rows[1]
    with locked(quality_dir):
        if _verdicts_only:
            ctx, build_docs = memory_context(), False
        else:
            ctx = context(quality_dir)
            prune_results(quality_dir, name, KEEP_RESULTS - 1)  # before the run: the new index lists what is kept
        gx_params = gx_parameters(suite.expectations, params, offsets)
        result = _run_checkpoint(ctx, (name, suite.expectations, engine), data, gx_params)
        ((result_id, validation),) = result.run_results.items()
        failed = sorted((r for r in validation.results if not r.success), key=lambda r: r.expectation_config.meta[RULE])
        keys = explain_rows.key_columns(suite.table) if failed and name_rows else ()  # a pass pays nothing for names
        if keys:
            _name_unexpected_rows(ctx, (name, engine, keys), data, failed, gx_params)
        shown = checked.to_pylist() if failed and checked is not None else []
        lines, explained = {}, {}
        for r in failed:
            index = r.expectation_config.meta[RULE]
            rule, expected = suite.expectations[index], params.get(parameter(index, suite.expectations[index]))
            lines[index] = failure(suite.table, rule, r.result, r.exception_info, expected, offsets.get(index, 0))
            explained[index] = explain_rows.commands(quality_dir, suite.table, r.result, shown) if name_rows else []
        if not _verdicts_only and (any(explained.values()) or left_out.rows or any(offsets.values())):
            _as_whole(validation, rows, offsets)  # the stored result, which its page renders
            _annotate(validation, explained, lines)
            ctx.validation_results_store.set(result_id, validation)
        docs = page = None
        if build_docs:
            ctx.build_data_docs(site_names=[SITE], resource_identifiers=[result_id, _suite_id(name)])
            publish(quality_dir)
            docs = docs_index(quality_dir) if is_object_store(quality_dir) else docs_path(ctx)
            page = page_path(ctx, result_id, quality_dir)
    failures = tuple(with_explain(line, explained[index]) for index, line in lines.items())
    checked_rows = left_out.statement(rows[0]) if left_out.rows else f"checked {rows[0]:,} rows"
    log.info(
        "suite %s %s: %s%s",
        name,
        "passed" if result.success else "FAILED",
        checked_rows,
        "".join(f"; {f}" for f in failures),
    )
    total = rows[0] + left_out.rows
    return Report(suite=name, success=bool(result.success), failures=failures, docs_path=docs, rows=total, page=page)


def _as_whole(validation: Any, rows: tuple[int, LeftOut], offsets: dict[int, exact.Number]) -> None:
    """Make a validation of some of a batch's rows (`rows`: (how many, the rows left out)) say what it says of the
    batch and its table: each rule's counts of the whole batch, a batch marker on its Data Docs page saying how many
    rows GX checked, and each sum as the table's (plus `offsets`, as the failure lines show it)."""
    given, left_out = rows
    for r in validation.results:
        index = r.expectation_config.meta[RULE]
        if left_out.rows:
            count_whole(r.result, left_out.counts.get(index, (left_out.rows, 0)))
        if offsets.get(index):
            show_table_sum(r.expectation_config.kwargs, r.result, offsets[index])
    if left_out.rows:
        validation.meta.setdefault("batch_markers", {})["streamtable_rows"] = left_out.statement(given)


def _annotate(validation: Any, explained: dict[int, list[str]], lines: dict[int, str]) -> None:
    """Show each failed rule's failure line and explain commands on its Data Docs page: as its expectation's
    description, which GX renders instead of its own sentence (an expectation's notes show on the suite's page only,
    and its meta properties no longer render in GX 1.x)."""
    for r in validation.results:
        index = r.expectation_config.meta[RULE]
        if explained.get(index):
            text = f"{lines[index]}. Explain the rows: " + "; ".join(explained[index])
            r.expectation_config.description = html.escape(text)  # GX writes it into the page as it is


def _name_unexpected_rows(ctx: Any, checked: tuple, data: Any, failed: list, params: dict) -> None:
    """Add to each failed row rule's result the unexpected rows' keys (`checked`: (suite name, engine, keys)), its
    expectation validated again on the batch alone, nothing stored: asked of every rule, they would cost a Spark job
    per rule on every validation. Naming them never changes a verdict: a failure to name them is logged."""
    name, engine, keys = checked
    rules = [r for r in failed if "partial_unexpected_list" in r.result]  # row rules: a sum names no rows
    if not rules:
        return
    try:
        asset = ctx.data_sources.get(ENGINES[engine]).get_asset(name)
        batch = asset.get_batch_definition(BATCH_DEFINITION).get_batch(batch_parameters={"dataframe": data})
        for r in rules:
            again = batch.validate(
                r.expectation_config.to_domain_obj(),
                result_format=explain_rows.result_format(keys),
                expectation_parameters=params,
            )
            r.result["partial_unexpected_index_list"] = again.result.get("partial_unexpected_index_list") or []
    except Exception:
        log.warning("suite %s: the unexpected rows could not be named for explain", name, exc_info=True)


def _suite_id(name: str) -> Any:
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    return ExpectationSuiteIdentifier(name=name)


def _run_checkpoint(ctx: Any, checked: tuple, data: Any, params: dict) -> Any:
    """Run the checkpoint validating rules as a suite on an engine (`checked`: (name, rules, engine)), made once per
    process; it stores the result, `_check` builds its page.

    A checkpoint whose suite or definitions were saved again since it was made (by another engine's checkpoint
    of the same suite, or by another process) is made again.
    """
    from great_expectations.exceptions.resource_freshness import ResourceFreshnessAggregateError

    key = (id(ctx), *checked)
    try:
        return _checkpoint(key, ctx).run(batch_parameters={"dataframe": data}, expectation_parameters=params)
    except ResourceFreshnessAggregateError:
        del _CHECKPOINTS[key]
        return _checkpoint(key, ctx).run(batch_parameters={"dataframe": data}, expectation_parameters=params)


def _checkpoint(key: tuple, ctx: Any) -> Any:
    _, name, rules, engine = key
    if key not in _CHECKPOINTS:
        _CHECKPOINTS[key] = _new_checkpoint(ctx, name, gx_suite(name, rules), engine)
    return _CHECKPOINTS[key]


def _new_checkpoint(ctx: Any, name: str, suite: Any, engine: str) -> Any:
    """Get-or-create the engine's datasource, asset, batch definition; add-or-update suite, validation, checkpoint."""
    library = gx()
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
    validation = ctx.validation_definitions.add_or_update(
        library.ValidationDefinition(name=name, data=batch, suite=suite)
    )
    result_format = explain_rows.result_format(())
    return ctx.checkpoints.add_or_update(
        library.Checkpoint(name=name, validation_definitions=[validation], actions=[], result_format=result_format)
    )
