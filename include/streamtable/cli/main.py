"""The `streamtable` command (its contract: docs/README.md): ingest, run, serve, status, reprocess, reset, show, query,
explain.

Errors print one line to stderr and exit non-zero, the code saying what happened (`streamtable.core.exits`); `--debug`
shows the traceback.
Commands that need Spark import it lazily, so `ingest`, `show`, `query`, `explain`, `status` and `pipelines` start fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading

from streamtable.cli.terminal import StatusLine, show_progress
from streamtable.core.errors import BadInputError, QualityGateError, StreamtableError
from streamtable.core.exits import BAD_INPUT, OK, PIPELINE_CODE, exit_code
from streamtable.core.settings import __version__
from streamtable.storage.lake import Lake, resolve_lake

GATED_COMMANDS = ("run", "serve", "reprocess", "validate")  # the commands that run quality suites


def _lake(args: argparse.Namespace) -> Lake:
    return Lake(resolve_lake(args.lake))


def cmd_ingest(args: argparse.Namespace) -> int:
    from streamtable.ingest.files import MAX_LINE_BYTES, ingest_file

    if args.kafka is not None:
        return cmd_ingest_kafka(args)
    if args.file is None:
        raise BadInputError("ingest needs a FILE, a DIR or --kafka TOPIC")
    limit = MAX_LINE_BYTES if args.max_line_bytes is None else args.max_line_bytes
    if args.file and os.path.isdir(args.file):
        return cmd_ingest_folder(args, limit)
    if args.follow and not getattr(args, "kafka", None):
        raise BadInputError("--follow needs a folder (or --kafka TOPIC), not a file")
    result = ingest_file(_lake(args), args.table, args.file, args.id, limit)
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
    ran = run(lake, args.pipeline)
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

    lake = _lake(args)
    names = [get_pipeline(args.pipeline).name] if args.pipeline else sorted(pipelines())
    statuses = [pipeline_status(lake, name).as_dict() for name in names]  # all read before any line: a table that
    for status in statuses:  # cannot be read fails the command with its one line, not after a partial answer
        print(json.dumps(status))


def cmd_reprocess(args: argparse.Namespace) -> None:
    from streamtable.core.registry import get_pipeline
    from streamtable.core.timefmt import parse_time
    from streamtable.runtime.commands.lifecycle import reprocess, version_at

    lake = _lake(args)
    pipeline = get_pipeline(args.pipeline)
    sought = args.input or pipeline.primary
    if sought not in pipeline.inputs:
        raise BadInputError(
            f"--input {sought}: not an input of {pipeline.name} (its inputs: {', '.join(pipeline.inputs)})"
        )
    if args.from_timestamp is not None:
        try:
            moment = parse_time(args.from_timestamp)
        except ValueError as e:
            raise BadInputError(f"--from-timestamp: {e}") from None
        version = version_at(lake, sought, moment)
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

    for line in json_lines(rows(_lake(args), args.table)):
        print(line)


def cmd_query(args: argparse.Namespace) -> None:
    from streamtable.storage.reader import json_lines, query

    for line in json_lines(query(_lake(args), args.table, *args.key)):
        print(line)


def cmd_explain(args: argparse.Namespace) -> None:
    from streamtable.runtime.observe.explain import explain

    for line in explain(_lake(args), args.table, *args.key, limit=args.limit or None, records=args.records):
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


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="streamtable", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"streamtable {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--lake", help="the lake directory (default: $STREAMTABLE_LAKE, else ./lake)")
    common.add_argument("--debug", action="store_true", help="show tracebacks (and logs at info, unless --log-level)")
    common.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default=os.environ.get("STREAMTABLE_LOG_LEVEL", "").lower() or None,
        help="log to stderr at this level: each batch's stages and timings, gate results, commits at info "
        "(default: $STREAMTABLE_LOG_LEVEL, else no logs: one line on an error)",
    )
    common.add_argument(
        "--pipelines",
        action="append",
        default=[],
        metavar="DIR",
        help="also load the pipelines declared in DIR's Python files (repeatable; env: STREAMTABLE_PIPELINES)",
    )
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, func, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_)
        p.set_defaults(func=func)
        return p

    p = command("ingest", cmd_ingest, "append JSON-lines records to an input changelog")
    p.add_argument("table")
    p.add_argument(
        "file", nargs="?", help="a JSON-lines file, - for stdin, or a folder of .jsonl/.json/.csv/.parquet files"
    )
    p.add_argument(
        "--id", help="the ingest's id: an ingest whose id the table took appends nothing (default: FILE's SHA-256)"
    )
    p.add_argument(
        "--max-line-bytes",
        type=int,
        metavar="N",
        help="a line longer than N bytes is quarantined (default: 1 MiB)",
    )
    p.add_argument("--follow", action="store_true", help="keep ingesting what arrives until SIGTERM")
    p.add_argument("--kafka", metavar="TOPIC", help="copy the Kafka topic's records (instead of FILE), each once")
    p.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT", help="with --kafka: the broker (default: $STREAMTABLE_KAFKA)"
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="with a folder and --follow: how often to look for new files (default: 1)",
    )
    p = command("run", cmd_run, "process everything the inputs hold now, then exit")
    p.add_argument("pipeline")
    p.add_argument(
        "--validate",
        action="store_true",
        help="then run the full quality suites on the published outputs in the same job and add their verdict to "
        "the report (`validation`); the exit status stays the run's (`streamtable validate` fails on a refusal)",
    )
    p = command("serve", cmd_serve, "run continuously, one run per micro-batch, until SIGTERM")
    p.add_argument("pipeline")
    p.add_argument("--interval", default="2 seconds", help="processing-time trigger (default: 2 seconds)")
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="after SIGTERM, how long the batch in flight may take before exiting without it (code 3; default: 600)",
    )
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="batch metrics at http://HOST:PORT/metrics")
    p.add_argument("--metrics-host", default="127.0.0.1", help="with --metrics-port: the address (default: 127.0.0.1)")
    p = command(
        "reprocess", cmd_reprocess, "rebuild outputs from a version (or time) of an input (default: the primary)"
    )
    p.add_argument("pipeline")
    p.add_argument("--input", metavar="TABLE", help="the input, stream or table, to seek in (default: the primary)")
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument("--from-version", type=int)
    start.add_argument("--from-timestamp")
    p.add_argument("--dry-run", action="store_true", help="compute and validate, publish nothing")
    p = command("reset", cmd_reset, "forget progress and outputs; the next run starts from version 0")
    p.add_argument("pipeline")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    command(
        "compact", cmd_compact, "compact the pipeline's outputs and stores (deletion vectors, small files)"
    ).add_argument("pipeline")
    command("validate", cmd_validate, "run the pipeline's quality suites on its published outputs").add_argument(
        "pipeline"
    )
    command("show", cmd_show, "print a table as JSON lines").add_argument("table")
    p = command("query", cmd_query, "print the current rows whose leading keys equal KEY...")
    p.add_argument("table")
    p.add_argument("key", nargs="*")
    p = command(
        "explain",
        cmd_explain,
        "where the rows of KEY... came from: each change, the batch, run and input versions that made it, and how "
        "far behind its inputs the pipeline is",
    )
    p.add_argument("table")
    p.add_argument("key", nargs="+", help="the row's key values (leading key columns: every row that has them)")
    p.add_argument(
        "--limit",
        type=int,
        default=10,
        metavar="N",
        help="at most N changes per row, newest first (0: all; default 10)",
    )
    p.add_argument(
        "--records",
        action="store_true",
        help="also the input records that fed the current row, where the pipeline lets streamtable know them",
    )
    command("status", cmd_status, "each pipeline's last batch and how far behind its inputs it is").add_argument(
        "pipeline", nargs="?"
    )
    command("pipelines", cmd_pipelines, "list the pipelines, their inputs and outputs")
    p = command("new", cmd_new, "write a pipeline skeleton and its test into DIR (they pass as written)")
    p.add_argument("pipeline")
    p.add_argument("--dir", default="pipelines", help="the folder to write into (default: ./pipelines)")
    command("emit-ticks", cmd_emit_ticks, "append a tick per user ever seen in user_presence").add_argument(
        "--at", help="the ticks' time, ISO-8601 (default: now)"
    )
    jars = command("jars", cmd_jars_fetch, "the jars Spark jobs need").add_subparsers(
        dest="jars_command", required=True
    )
    p = jars.add_parser("fetch", help="download the pinned jars once from a Maven repository (default: Maven Central)")
    p.add_argument("--repository", metavar="URL", help="a Maven repository (env: STREAMTABLE_MAVEN_REPOSITORY)")
    p.add_argument(
        "--dest",
        metavar="DIR",
        help="where to put them (default: $STREAMTABLE_JARS, else the environment's share/streamtable/jars)",
    )
    p.add_argument("--with", dest="with_", action="append", default=[], choices=["s3a"], help="also these jars")
    p.add_argument("--force", action="store_true", help="download them again even if present")
    return top


LOG_LEVELS = ("error", "warning", "info", "debug")
# Commands that only read and print: a reader that closed their output (`| head`) ends them by SIGPIPE, as it ends
# `cat`; the others keep Python's BrokenPipeError, so nothing of theirs stops between a commit and its report.
QUIET_ON_A_CLOSED_PIPE = ("show", "query", "explain", "status", "pipelines")
SPARK_LOG_LEVELS = {"error": "error", "warning": "warn", "info": "warn", "debug": "info"}  # the JVM's, per level


def configure_logging(args: argparse.Namespace) -> StatusLine | None:
    """Log streamtable's modules to stderr at `--log-level` (info with `--debug`), other libraries at warning or above,
    each line naming the pipeline (or table) of the command; without either flag, no logs at all (PySpark logs
    failures itself, as JSON: the one line `main` prints is what a user needs), only a long command's status line on
    a terminal (returned, to be closed when the command ends)."""
    level = args.log_level or ("info" if args.debug else None)
    if level is None:
        status = show_progress(sys.stderr, args.command)
        if status is None:
            logging.disable(logging.CRITICAL)
        else:
            logging.getLogger().addHandler(logging.NullHandler())  # other libraries' records: nowhere
        return status
    os.environ.setdefault("STREAMTABLE_SPARK_LOG_LEVEL", SPARK_LOG_LEVELS[level])
    about = (getattr(args, "pipeline", None) or getattr(args, "table", None) or args.command).replace("%", "%%")
    numeric = logging.getLevelNamesMapping()[level.upper()]
    logging.basicConfig(
        level=max(numeric, logging.WARNING),
        format=f"%(asctime)s %(levelname)s [{about}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("streamtable").setLevel(numeric)
    return None


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    if args.log_level is not None and args.log_level not in LOG_LEVELS:  # from $STREAMTABLE_LOG_LEVEL
        top.error(f"STREAMTABLE_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, not {args.log_level!r}")
    status = configure_logging(args)
    if args.command in QUIET_ON_A_CLOSED_PIPE and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `show TABLE | head`: end as Unix tools do, without a word
    from streamtable.core.registry import current, use_folders

    use_folders(args.pipelines)
    if args.command != "jars":  # every other command reads the registry: each broken file is one line, once
        for error in current().errors:
            print(f"streamtable: {error}", file=sys.stderr)
    if args.command in GATED_COMMANDS:
        from streamtable.quality.gx_import import import_gx_in_background

        import_gx_in_background()
    try:
        try:
            code = args.func(args)  # None, or the exit code of a command that did part of its work (ingest DIR)
        finally:
            if status is not None:
                status.close()
    except StreamtableError as e:
        if args.debug:
            raise
        print(f"streamtable: {e}", file=sys.stderr)
        return exit_code(e)
    except Exception as e:  # anything else is a bug or an environment problem: still one line
        if args.debug:
            raise
        if reason := unwritable(e):
            print(
                f"streamtable: cannot write to the lake {resolve_lake(args.lake)}: {reason}; make room (or make it "
                "writable) and run the command again: it finishes the work",
                file=sys.stderr,
            )
            return 1
        print(
            f"streamtable: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            " (run with --debug for details)",
            file=sys.stderr,
        )
        return 1
    return code or 0


STORAGE_FAILURES = ("No space left on device", "Read-only file system", "Disk quota exceeded")


def unwritable(error: BaseException) -> str | None:
    """Why the lake's file system refused a write (full, read-only, over quota), found in the error or its causes:
    Python's OSError, delta-rs's and the JVM's (a Py4JJavaError's Java trace) all name it; None otherwise."""
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return next((r for e in chain for r in STORAGE_FAILURES if r in str(e)), None)


def entry(argv: list[str] | None = None) -> None:
    """Run a command (the console script, and the Spark job under spark-submit), then leave with `os._exit`.

    Native threads (delta-rs's runtime, Arrow's thread pools) can abort the interpreter's normal shutdown
    ("terminate called without an active exception", SIGABRT) after a command's work and output are complete,
    which turned a good `run` into exit code -6 about once in ten. So the interpreter is not finalised: a
    SparkSession is stopped, the output flushed, and the process ends with the command's code.
    """
    code = main(argv)
    _stop_spark()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _stop_spark() -> None:
    """Stop the process's SparkSession, if a command started one (its JVM ends with it)."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()


if __name__ == "__main__":
    entry()
