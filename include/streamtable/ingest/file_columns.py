"""Whether a CSV header's or a Parquet schema's column names fit an input's declared columns.

Names are matched exactly, as a JSON line's fields are. A declared column the file lacks is null in each record when
it is nullable, and refuses the file otherwise; a declared column the file names only in another case or with spaces
around it (`Region`, ` region`, a spreadsheet's header) refuses the file too, naming both: read by its exact name it
would be null in every record (or the file refused as lacking it) while the file holds its values.
"""

from __future__ import annotations

from streamtable.core.tables import Table


class RefusedFile(Exception):
    """A file whose columns cannot fit its table: the message names the column."""


def absent_columns(table: Table, names: list[str], where: str) -> set[str]:
    """The nullable declared columns `names` (a file's, in its `where`: "header", "schema") lacks, read as null.

    Raises RefusedFile for a declared column it lacks that is not nullable, or that it names in another case or
    with spaces around it.
    """
    near = {name.strip().casefold(): name for name in names}
    absent = set()
    for column in table.columns:
        if column.name in names:
            continue
        other = near.get(column.name.casefold())
        if other is not None:
            raise RefusedFile(
                f"column {column.name} is in its {where} as {other!r}: rename it {column.name!r} (names match exactly)"
            )
        if not column.nullable:
            raise RefusedFile(f"column {column.name} is not in its {where}")
        absent.add(column.name)
    return absent
