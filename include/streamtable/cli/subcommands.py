"""What each `streamtable` subcommand does (`cli.main` parses the line and runs one): each calls the layer that does
the work, importing it (and Spark) only when it runs, and prints its JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from streamtable.core.errors import BadInputError, QualityGateError
from streamtable.core.exits import BAD_INPUT, OK, PIPELINE_CODE
from streamtable.storage.lake import Lake, resolve_lake

GATED_COMMANDS = ("run", "serve", "reprocess", "validate")  # the commands that run quality suites


def _lake(args: argparse.Namespace) -> Lake:
    return Lake(resolve_lake(args.lake))


@contextmanager
def _reading(args: argparse.Namespace, table: str | None = None) -> Iterator[Lake]:
    """The lake a reading command reads; when a local one did not exist, its answer is followed by a line on stderr,
    so a wrong --lake or working directory (the default is ./lake) does not read as tables without rows. A Delta
    table of another job (`table`) is read where it is, lake or not: no such line."""
    lake = _lake(args)
    absent = not lake.on_object_store and not os.path.isdir(lake.root) and not _elsewhere(table)
    yield lake
    if absent:
        print(
            f"streamtable: no lake at {lake.root} (--lake DIR, else STREAMTABLE_LAKE, else ./lake): nothing was "
            "ingested or run there",
            file=sys.stderr,
        )


def _elsewhere(table: str | None) -> bool:
    """Whether `table` is a Delta table of another job, which lives outside the lake (UnknownTableError for a name
    no pipeline declares)."""
    from streamtable.storage.reader import table_spec

    return table is not None and table_spec(table).external


def cmd_ingest(args: argparse.Namespace) -> int:
    from streamtable.ingest.files import MAX_LINE_BYTES
    from streamtable.ingest.folders import ingest_named_file

    if args.kafka is not None:
        return cmd_ingest_kafka(args)
    if args.file is None:
        raise BadInputError("ingest needs a FILE, a DIR or --kafka TOPIC")
    limit = MAX_LINE_BYTES if args.max_line_bytes is None else args.max_line_bytes
    if args.file and os.path.isdir(args.file):
        return cmd_ingest_folder(args, limit)
    if args.follow and not os.path.lexists(args.file):
        raise BadInputError(f"no such folder: {args.file!r}")
    if args.follow and not getattr(args, "kafka", None):
        raise BadInputError("--follow needs a folder (or --kafka TOPIC), not a file")
    result = ingest_named_file(_lake(args), args.table, args.file, args.id, limit)
    print(json.dumps(result.as_dict() | {"duplicate": result.duplicate}))
    return 0


def cmd_ingest_kafka(args: argparse.Namespace) -> int:
    """`ingest TABLE --kafka TOPIC [--follow]`: one JSON line at the end (bounded) or after each commit (--follow)."""
    from streamtable.ingest.kafka import copy_topic

    if args.file is not None or args.id is not None or args.max_line_bytes is not None:
        raise BadInputError("--kafka TOPIC copies a topic: FILE, --id and --max-line-bytes are for files")

    def show(result) -> None:
        print(json.dumps(result.as_dict()), flush=True)

    result = copy_topic(_lake(args), args.table, args.kafka, args.bootstrap_servers, args.follow, on_commit=show)
    if not args.follow:
        show(result)
    return 0


def cmd_ingest_folder(args: argparse.Namespace, limit: int) -> int:
    """`ingest TABLE DIR [--follow]`: exits BAD_INPUT when a file was refused (each named on stderr)."""
    from streamtable.ingest.folders import ingest_folder

    if args.id is not None:
        raise BadInputError("--id names one file's ingest: a folder's files each have their own (their hash)")
    done = ingest_folder(
        _lake(args), args.table, args.file, follow=args.follow, poll_interval=args.poll_interval, max_line_bytes=limit
    )
    return BAD_INPUT if done.refused and not args.follow else OK


def cmd_run(args: argparse.Namespace) -> None:
    from streamtable.quality.docs_site import build_docs, docs_index
    from streamtable.runtime.commands.lifecycle import run, validate

    lake = _lake(args)
    try:
        ran = run(lake, args.pipeline)
    except QualityGateError:  # the refused batch's Data Docs page now: it names the explain command of its rows
        build_docs(lake.quality_dir)
        raise
    report = ran.as_dict()
    if args.validate:  # in the same job: a scheduled micro-batch is one spark-submit, its DAG's gate reads this verdict
        report["validation"] = verdict(args.pipeline, validate(lake, args.pipeline))
    # a run that a live serve took stays Spark- and GX-free: the next run or validate builds the Data Docs' new pages
    docs = docs_index(lake.quality_dir) if ran.served_by and not args.validate else build_docs(lake.quality_dir)
    print(json.dumps(report | {"data_docs": docs}))


def cmd_serve(args: argparse.Namespace) -> None:
    from streamtable.runtime.commands.lifecycle import run_continuously

    observe = None
    if args.metrics_port is not None:
        from streamtable.cli.metrics import ServeMetrics

        observe = ServeMetrics(args.metrics_port, args.metrics_host).observe

    def show(progress) -> None:
        if observe is not None:  # first: a scraper that saw the progress line sees its batch counted
            observe(progress)
        print(json.dumps({"progress": progress.as_dict()}), flush=True)

    report = run_continuously(_lake(args), args.pipeline, args.interval, args.stop_timeout, on_progress=show)
    print(json.dumps(report.as_dict()))


def cmd_status(args: argparse.Namespace) -> None:
    from streamtable.core.registry import get_pipeline, pipelines
    from streamtable.runtime.observe.status import pipeline_status

    names = [get_pipeline(args.pipeline).name] if args.pipeline else sorted(pipelines())
    with _reading(args) as lake:
        statuses = [pipeline_status(lake, name).as_dict() for name in names]  # all read before any line: a table
        for status in statuses:  # that cannot be read fails the command with its one line, not a partial answer
            print(json.dumps(status))


def cmd_reprocess(args: argparse.Namespace) -> None:
    from streamtable.core.registry import get_pipeline
    from streamtable.requests import moment, sought_input
    from streamtable.runtime.commands.lifecycle import reprocess, version_at

    lake = _lake(args)
    sought = sought_input(get_pipeline(args.pipeline), args.input)
    if args.from_timestamp is not None:
        version = version_at(lake, sought, moment(args.from_timestamp))
    else:
        version = args.from_version
    report = reprocess(lake, args.pipeline, version, dry_run=args.dry_run, input_name=sought)
    print(json.dumps(report.as_dict() | {"data_docs": _docs(args)}))


def cmd_reset(args: argparse.Namespace) -> None:
    from streamtable.runtime.commands.lifecycle import reset

    print(json.dumps(reset(_lake(args), args.pipeline, dry_run=args.dry_run)))


def cmd_compact(args: argparse.Namespace) -> None:
    from streamtable.runtime.commands.compact import compact

    print(json.dumps(compact(_lake(args), args.pipeline)))


def cmd_validate(args: argparse.Namespace) -> None:
    from streamtable.runtime.commands.lifecycle import validate

    report = verdict(args.pipeline, validate(_lake(args), args.pipeline))
    failures = report.pop("failures")
    print(json.dumps(report))
    if failures:
        raise QualityGateError(f"{args.pipeline}: " + "; ".join(failures))


def verdict(pipeline: str, reports: list) -> dict:
    """The full suites' verdict on a pipeline's published outputs: each suite's success, the failed expectations
    (one line each), the Data Docs index and each suite's page of this validation."""
    return {
        "pipeline": pipeline,
        "suites": {r.suite: r.success for r in reports},
        "data_docs": next((r.docs_path for r in reports if r.docs_path), None),
        "pages": {r.suite: r.page for r in reports if r.page},
        "failures": [f for r in reports for f in r.failures],
    }


def cmd_show(args: argparse.Namespace) -> None:
    from streamtable.storage.reader import json_lines, rows

    with _reading(args, args.table) as lake:
        for line in json_lines(rows(lake, args.table)):
            print(line)


def cmd_query(args: argparse.Namespace) -> None:
    from streamtable.storage.reader import json_lines, query

    with _reading(args, args.table) as lake:
        for line in json_lines(query(lake, args.table, *args.key)):
            print(line)


def cmd_explain(args: argparse.Namespace) -> None:
    from streamtable.runtime.observe.explain import explain

    with _reading(args) as lake:
        for line in explain(lake, args.table, *args.key, limit=args.limit or None, records=args.records):
            print(json.dumps(line, ensure_ascii=False))


def cmd_emit_ticks(args: argparse.Namespace) -> None:
    from streamtable.core.timefmt import parse_time
    from streamtable.ingest.ticks import emit_ticks

    try:
        at = parse_time(args.at) if args.at is not None else None
    except ValueError as e:
        raise BadInputError(f"--at: {e}") from None
    for result in emit_ticks(_lake(args), at):
        print(json.dumps(result.as_dict()))


def cmd_pipelines(args: argparse.Namespace) -> int:
    """One JSON line per pipeline that loaded; PIPELINE_CODE when a file is broken (each named on stderr)."""
    from streamtable.core.registry import current

    registry = current()
    for p in registry.pipelines.values():
        print(
            json.dumps(
                {
                    "pipeline": p.name,
                    "primary": p.primary,
                    "inputs": list(p.inputs),
                    "outputs": [t.name for t in p.outputs],
                    "doc": p.doc.strip().splitlines()[0] if p.doc.strip() else "",
                    "file": p.declared_at,
                    "example": registry.is_example("pipeline", p.name),  # a built-in one (Airflow: only where asked)
                    "roles": {name: "stream" if name in p.streams else "table" for name in p.inputs}
                    | {t.name: "state" for t in p.state},
                    "keys": {t.name: list(t.keys) for t in p.outputs},
                }
            )
        )
    return PIPELINE_CODE if registry.errors else OK


def cmd_new(args: argparse.Namespace) -> None:
    from streamtable.cli.skeleton import write_skeleton

    print(json.dumps({"pipeline": args.pipeline, "files": [str(p) for p in write_skeleton(args.pipeline, args.dir)]}))


def cmd_jars_fetch(args: argparse.Namespace) -> None:
    from pathlib import Path

    from streamtable.cli.jars import default_repository, fetch
    from streamtable.runtime.spark_settings import jar_dir

    dest = Path(args.dest) if args.dest else jar_dir()
    groups = ("delta", *dict.fromkeys(args.with_))
    print(json.dumps(fetch(args.repository or default_repository(), dest, groups, force=args.force)))


def _docs(args: argparse.Namespace) -> str:
    from streamtable.quality.docs_site import docs_index

    return docs_index(_lake(args).quality_dir)
