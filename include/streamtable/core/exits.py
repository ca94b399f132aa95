"""The exit codes of `streamtable` commands: what happened, told apart for a shell, a supervisor or Airflow.

- 0: done.
- 1: failed: a crash, a bug, the environment (Spark, Java, jars, a full or read-only disk), a table that cannot be
  read (credentials, the network, a corrupt log: `TableReadError`). Look, then retry.
- 2: bad input: the command's arguments, a file, a table or pipeline name, a version out of range, a usage error.
  A retry fails the same way: fix the request.
- 3: `serve` stopped without its batch in flight (unfinished `--stop-timeout` s after SIGTERM); the next start
  redoes it.
- 4: the quality gate refused: a suite failed and nothing was published. Read the Data Docs; fix the data or rules.
- 5: the pipeline's own code or declarations are wrong (the line names its file and line): fix the pipeline file.

A run that finds the pipeline's lock held waits for it (`Lake.lock`): that is never an error, so it has no code.
"""

from __future__ import annotations

from streamtable.core.errors import (
    BadInputError,
    DeclarationChangedError,
    OffsetOutOfRangeError,
    PipelineCodeError,
    PipelineDefinitionError,
    PipelineLoadError,
    QualityGateError,
    UnknownPipelineError,
    UnknownTableError,
)

OK = 0
FAILED = 1
BAD_INPUT = 2  # also argparse's code for a usage error
STOPPED_WITHOUT_BATCH = 3  # `serve`'s (streamtable.runtime.query.streaming._abandon)
QUALITY_GATE = 4
PIPELINE_CODE = 5

_CODES: tuple[tuple[tuple[type[BaseException], ...], int], ...] = (
    ((QualityGateError,), QUALITY_GATE),
    (
        (BadInputError, DeclarationChangedError, UnknownTableError, UnknownPipelineError, OffsetOutOfRangeError),
        BAD_INPUT,
    ),
    ((PipelineLoadError, PipelineCodeError, PipelineDefinitionError), PIPELINE_CODE),
)


def exit_code(error: BaseException) -> int:
    """The code a command that raised `error` exits with (FAILED for anything not named above)."""
    return next((code for kinds, code in _CODES if isinstance(error, kinds)), FAILED)
