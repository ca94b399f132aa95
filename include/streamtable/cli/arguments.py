"""The `streamtable` command line: its commands, their arguments and options, and what runs each
(`cli.subcommands`)."""

from __future__ import annotations

import argparse
import os

from streamtable.cli.subcommands import (
    cmd_compact,
    cmd_emit_ticks,
    cmd_explain,
    cmd_ingest,
    cmd_jars_fetch,
    cmd_new,
    cmd_pipelines,
    cmd_query,
    cmd_reprocess,
    cmd_reset,
    cmd_run,
    cmd_serve,
    cmd_show,
    cmd_status,
    cmd_validate,
)
from streamtable.core.settings import __version__

DESCRIPTION = (  # what --help says first
    "The `streamtable` command (its contract: docs/README.md): ingest records into inputs; run, serve, reprocess, "
    "reset, compact and validate a pipeline; show, query and explain tables; status of pipelines; list them "
    "(pipelines) or start one (new). Pipelines of your own: --pipelines DIR or STREAMTABLE_PIPELINES."
)
LOG_LEVELS = ("error", "warning", "info", "debug")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="streamtable", description=DESCRIPTION)
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
