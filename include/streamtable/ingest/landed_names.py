"""The names a table took files under from a landing folder, so a file that changed after it was taken is named.

The ingest log (`files.IdRegistry`) keys a file by the SHA-256 of its bytes and records no name, and the changelog's
commit carries only the transaction of that id: neither says which name held which bytes. So a folder ingest writes,
for each file it takes, `<lake>/_ingest/<table>/names/<SHA-256 of folder and name>.json` (`{"folder", "name", "id",
"version", "appended"}`): once, before the id is registered, so a file whose id the ingest log holds has its name
here too (files taken before this index existed have none). Looking a name up is one small read per file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from streamtable.ingest.files import IngestResult
from streamtable.storage.lake import Lake
from streamtable.storage.store import join


@dataclass(frozen=True)
class TakenName:
    """What a table took under a name of a landing folder: the file's id (the SHA-256 of its bytes) and figures."""

    ingest_id: str
    version: int | None
    appended: int


class NameRegistry:
    """The names the files of one landing folder were taken under by one table, with the id each held."""

    def __init__(self, lake: Lake, table: str, folder: Path) -> None:
        self.lake, self.table, self.folder = lake, table, str(folder.resolve())

    def _file(self, name: str) -> str:
        key = hashlib.sha256(f"{self.folder}\0{name}".encode(errors="surrogatepass")).hexdigest()
        return join(self.lake.ingest_dir(self.table), "names", f"{key}.json")

    def get(self, name: str) -> TakenName | None:
        """What the table took under `name` from this folder, or None."""
        entry = self.lake.store.read_json(self._file(name))
        if entry is None:
            return None
        return TakenName(entry["id"], entry["version"], entry["appended"])

    def put(self, name: str, ingest_id: str, result: IngestResult) -> None:
        """Record that the file `name` was taken with id `ingest_id` (the first record of a name stays)."""
        entry: dict[str, object] = {"folder": self.folder, "name": name, "id": ingest_id}
        entry |= {"version": result.version, "appended": result.appended}
        self.lake.store.put_if_absent(self._file(name), json.dumps(entry).encode(errors="surrogatepass"))

    def changed(self, taken: TakenName | None, ingest_id: str) -> str | None:
        """Why a file whose bytes are `ingest_id`'s, under a name the table `taken` before (`get`), is worth a word
        (None: a name not taken, or taken with these bytes): its records may be taken twice."""
        if taken is None or taken.ingest_id == ingest_id:
            return None
        took = (
            f"version {taken.version} took it"
            if taken.appended and taken.version is not None
            else "an earlier ingest took it (its records all went to quarantine)"
        )
        return (
            f"it changed after {took}; a file is known by its bytes, so it is taken again, whole: records it held "
            f"then are taken twice (have writers write files elsewhere and rename them into {self.folder} when "
            "complete; put new records in files of new names)"
        )
