"""Named exceptions: each says what is wrong in one line, which the CLI prints without a traceback."""

from __future__ import annotations

INPUT_REFUSED = "streamtable refused an input: "  # leads the text of an input check raised inside Spark (F.raise_error)


class StreamtableError(Exception):
    """Base of every error streamtable reports to a user."""


class SetupError(StreamtableError):
    """The installation is incomplete (missing jars, Java, venv)."""


class StorageError(StreamtableError):
    """The lake's storage refused or did not answer (credentials, the network, a missing bucket): the message names
    the path, so its store, and the cause."""


class TableReadError(StorageError):
    """A table that exists, or may, cannot be read: credentials, the network, a corrupt log. Never read as an empty one
    (the message names the table's path, its store, and the cause)."""


class UnknownTableError(StreamtableError):
    """A command named a table that no pipeline declares."""


class UnknownPipelineError(StreamtableError):
    """A command named a pipeline that does not exist."""


class BadInputError(StreamtableError):
    """A command's argument or input file cannot be used."""


class OffsetOutOfRangeError(StreamtableError):
    """A requested version or timestamp is outside what the input table holds."""


class DeclarationChangedError(StreamtableError):
    """A pipeline's declaration changed in a way its live generation cannot apply (the message names the change and
    the `reprocess` or `reset` that applies it)."""

    @classmethod
    def aggregated_into_added(cls, pipeline: str, table: str, columns: list[str]) -> DeclarationChangedError:
        """The refusal of aggregating into `columns`, which `table` gained after its rows were computed."""
        return cls(
            f"{pipeline}: {table}'s column(s) {', '.join(columns)} were added after its rows were computed, and "
            "process aggregates into them: a row updated now would hold only its later records' part; "
            f"`streamtable reprocess {pipeline} --from-version 0` rebuilds {table} with them"
        )


class QualityGateError(StreamtableError):
    """An output failed its Great Expectations suite; nothing was published."""


class PipelineLoadError(StreamtableError):
    """A pipeline file cannot be imported, or declares something inconsistent (the message names file and line)."""


class PipelineCodeError(StreamtableError):
    """A pipeline's own code failed while computing a batch (the message names its file and line)."""


class PipelineDefinitionError(StreamtableError):
    """A mistake in a pipeline author's declarations or calls (the subclasses say which kind)."""


class DeclarationError(PipelineDefinitionError, ValueError):
    """A table or pipeline declares something inconsistent (a key that is not a column, a stream without time)."""


class OutputTypeError(PipelineDefinitionError, ValueError):
    """A batch's rows hold a value an output column's declared type cannot hold (a total past its DECIMAL's digits)."""


class UndeclaredNameError(PipelineDefinitionError, KeyError):
    """Code named an input, output, state store or metric its pipeline does not declare."""

    def __str__(self) -> str:  # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""


class OperatorArgumentError(PipelineDefinitionError, ValueError):
    """An operator was called with arguments it cannot use (an unknown mode, clashing column names)."""
