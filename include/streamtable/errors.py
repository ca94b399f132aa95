"""Named exceptions: each says what is wrong in one line, which the CLI prints without a traceback."""

from __future__ import annotations


class StreamtableError(Exception):
    """Base of every error streamtable reports to a user."""


class SetupError(StreamtableError):
    """The installation is incomplete (missing jars, Java, venv)."""


class UnknownTableError(StreamtableError):
    """A command named a table that no pipeline declares."""


class UnknownPipelineError(StreamtableError):
    """A command named a pipeline that does not exist."""


class BadInputError(StreamtableError):
    """A command's argument or input file cannot be used."""


class OffsetOutOfRangeError(StreamtableError):
    """A requested version or timestamp is outside what the input table holds."""


class QualityGateError(StreamtableError):
    """An output failed its Great Expectations suite; nothing was published."""


class PipelineLoadError(StreamtableError):
    """A pipeline file cannot be imported, or declares something inconsistent (the message names file and line)."""


class PipelineCodeError(StreamtableError):
    """A pipeline's own code failed while computing a batch (the message names its file and line)."""
