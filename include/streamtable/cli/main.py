"""The `streamtable` command (its contract: docs/README.md): ingest, run, serve, status, reprocess, reset, show, query,
explain.

Errors print one line to stderr and exit non-zero, the code saying what happened (`streamtable.core.exits`); `--debug`
shows the traceback.
Commands that need Spark import it lazily, so `ingest`, `show`, `query`, `explain`, `status` and `pipelines` start fast.
The line is parsed by `cli.arguments`; each command is a function of `cli.subcommands`; this module runs one, with
its logging, and turns what it raises into one line and the exit code.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import signal
import sys
import threading

from streamtable.cli.arguments import LOG_LEVELS, parser
from streamtable.cli.subcommands import GATED_COMMANDS
from streamtable.cli.terminal import StatusLine, show_progress
from streamtable.core.errors import StreamtableError
from streamtable.core.exits import exit_code
from streamtable.storage.lake import resolve_lake

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
            sys.stdout.flush()  # here: a reader gone is told below, not by a traceback of the interpreter's last flush
        finally:
            if status is not None:
                status.close()
    except StreamtableError as e:
        if args.debug:
            raise
        print(f"streamtable: {e}", file=sys.stderr)
        return exit_code(e)
    except BrokenPipeError:  # `run ... | head`: the reader left; what the command committed stays committed
        sys.stdout = io.StringIO()  # what is left to print goes nowhere: the last flush cannot fail again
        print(
            f"streamtable: {args.command}: its output's reader closed the pipe, so its last lines were not printed; "
            "the work it committed stays committed (`streamtable status` shows it)",
            file=sys.stderr,
        )
        return 1
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
