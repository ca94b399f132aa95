"""Progress on a terminal: one status line on stderr, rewritten in place, for a command that may run long.

`run`, `reprocess`, `serve` and `ingest` show it when stderr is a terminal and no `--log-level` was asked for: the
command, the time since it started, the batches committed and their input records, and the stage in flight (from
the `streamtable` loggers' info records). Not on a terminal, nothing is shown: the output stays machine-readable,
and the final JSON line on stdout is the same either way.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TextIO

PROGRESS_COMMANDS = ("run", "reprocess", "serve", "ingest")
CLEAR = "\r\x1b[K"  # back to the line's start, erase it


class StatusLine(logging.Handler):
    """Shows each info record of streamtable's loggers as the status line's stage; counts committed batches."""

    def __init__(self, stream: TextIO, command: str):
        super().__init__(logging.INFO)
        self.stream, self.command = stream, command
        self.started = time.monotonic()
        self.batches = self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("progress "):
            self.batches += 1
            self.records += int(json.loads(message.removeprefix("progress ")).get("input_rows") or 0)
            message = "committed"
        elapsed = time.monotonic() - self.started
        line = f"{self.command}: {elapsed:.0f} s, {self.batches} batches, {self.records} records; {message}"
        self.stream.write(CLEAR + line[: _columns(self.stream) - 1])
        self.stream.flush()

    def close(self) -> None:
        """Erase the status line, so what the command prints last is not mixed with it."""
        self.stream.write(CLEAR)
        self.stream.flush()
        super().close()


def _columns(stream: TextIO) -> int:
    """The terminal's width (a pseudo-terminal may say 0: then 200)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 200
    except OSError:
        return 80


def show_progress(stream: TextIO, command: str) -> StatusLine | None:
    """Attach a status line to the `streamtable` loggers if `command` may run long and `stream` is a terminal."""
    if command not in PROGRESS_COMMANDS or not stream.isatty():
        return None
    status = StatusLine(stream, command)
    logger = logging.getLogger("streamtable")
    logger.addHandler(status)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return status
