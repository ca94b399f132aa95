"""One file-system interface for a lake on a local disk or on S3-compatible object storage (`s3://BUCKET/PREFIX`).

Everything a lake keeps outside its Delta tables (generation markers, swap markers, staging manifests, id
registries, leases) goes through a `Store`: small objects read and written whole, put-if-absent, compare-and-swap
on an ETag, listing and deleting under a prefix. No module outside `streamtable.storage` knows which kind of lake
it works on.

Why obstore (the Python binding of the Rust `object_store` crate): delta-rs itself reaches S3 through
`object_store`, so one set of options (`storage_options`) and the standard AWS variables serve the Delta tables
and these small objects alike, and both commit with the same conditional requests: a put is atomic (readers see
the old or the new object, never a part), `mode="create"` is put-if-absent (`If-None-Match: *`), and
`mode={"e_tag": ...}` is compare-and-swap (`If-Match`). There is no rename and no `flock` on S3, so nothing here
uses them there.

Local lakes: `object_store`'s local file system has put-if-absent (a hard link that fails if the name exists) and
atomic puts (a temporary file renamed), but no compare-and-swap: `compare_and_swap` does it here under an
`flock` on a sidecar file beside the object (`.<name>.cas`), which every local CAS of that object takes.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore as obs
from obstore.exceptions import AlreadyExistsError, BaseError, NotFoundError, PreconditionError
from obstore.store import LocalStore, S3Store

from streamtable.core.errors import StorageError
from streamtable.storage.aws import S3_SCHEMES, aws_settings

if TYPE_CHECKING:
    import pyarrow.dataset
    import pyarrow.fs


def is_object_store(root: str) -> bool:
    """Whether `root` names a lake on S3-compatible object storage (`s3://` or `s3a://`)."""
    return root.startswith(S3_SCHEMES)


def normalize_root(root: str) -> str:
    """A lake root as delta-rs and `Store` take it: `s3://bucket/prefix` (no trailing slash), or an absolute path."""
    if is_object_store(root):
        bucket, _, prefix = root.split("://", 1)[1].partition("/")
        if not bucket:
            raise ValueError(f"{root!r}: an s3:// lake names a bucket: s3://BUCKET/PREFIX")
        prefix = "/".join(p for p in prefix.split("/") if p)
        return f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
    return str(Path(root).expanduser().resolve())


def join(base: str, *parts: str) -> str:
    """`base/part/...` for a local path or a URI alike."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def spark_path(path: str) -> str:
    """The path Spark (Hadoop's s3a file system) opens: `s3://` becomes `s3a://`; local paths are unchanged."""
    return "s3a://" + path[len("s3://") :] if path.startswith("s3://") else path


def storage_options(root: str) -> dict[str, str] | None:
    """delta-rs `storage_options` for a table under `root` (None for a local path).

    `conditional_put=etag`: delta-rs commits each log entry with put-if-absent (S3 conditional writes), so two
    delta-rs writers of one table are safe without DynamoDB and without an unsafe rename (it is delta-rs 1.x's
    default for S3: said here so that no environment turns it off).
    """
    if not is_object_store(root):
        return None
    return aws_settings() | {"conditional_put": "etag"}


@dataclass(frozen=True)
class Versioned:
    """An object's content and the ETag it had when read (for a compare-and-swap)."""

    data: bytes
    etag: str

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Store:
    """A lake's objects: paths are full (under `root`), as `Lake`'s methods return them."""

    root: str
    _store: Any = field(repr=False)

    @staticmethod
    def for_lake(root: str) -> Store:
        """The store of a lake at a local path or `s3://BUCKET/PREFIX` (credentials and endpoint: `aws_settings`)."""
        return _store_for(normalize_root(root), tuple(sorted(aws_settings().items())))

    @property
    def local(self) -> bool:
        return not is_object_store(self.root)

    def key(self, path: str) -> str:
        """The object key of `path` relative to the root ('' for the root itself)."""
        if path == self.root:
            return ""
        if not path.startswith(self.root + "/"):
            raise ValueError(f"{path!r} is not under the lake {self.root!r}")
        return path[len(self.root) + 1 :]

    # reads
    def read(self, path: str) -> Versioned | None:
        """The object at `path` with its ETag, or None."""
        try:
            result = obs.get(self._store, self.key(path))
        except (NotFoundError, FileNotFoundError):
            return None
        except BaseError as error:
            raise refused("read", path, error) from error
        return Versioned(bytes(result.bytes()), result.meta["e_tag"] or "")

    def read_json(self, path: str) -> Any | None:
        found = self.read(path)
        return None if found is None else found.json()

    def exists(self, path: str) -> bool:
        try:
            obs.head(self._store, self.key(path))
        except (NotFoundError, FileNotFoundError):
            return False
        except BaseError as error:
            raise refused("read", path, error) from error
        return True

    def objects(self, prefix: str) -> list[str]:
        """Full paths of every object under the folder `prefix`, sorted."""
        key = self.key(prefix)
        found: list[str] = []
        try:
            for chunk in obs.list(self._store, key + "/" if key else None):
                found += [join(self.root, meta["path"]) for meta in chunk if not _hidden(meta["path"])]
        except (NotFoundError, FileNotFoundError):
            return []
        except BaseError as error:
            raise refused("list", prefix, error) from error
        return sorted(found)

    def children(self, prefix: str) -> list[str]:
        """Names of the folders and objects directly under the folder `prefix`, sorted."""
        key = self.key(prefix)
        try:
            listed = obs.list_with_delimiter(self._store, key + "/" if key else None)
        except (NotFoundError, FileNotFoundError):
            return []
        except BaseError as error:
            raise refused("list", prefix, error) from error
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listed["common_prefixes"]]
        names += [m["path"].rsplit("/", 1)[-1] for m in listed["objects"]]
        return sorted({n for n in names if not _hidden(n)})

    # writes
    def write(self, path: str, data: bytes) -> str:
        """Replace the object at `path` atomically (readers see the old or the new content); return its ETag."""
        return obs.put(self._store, self.key(path), data, mode="overwrite")["e_tag"] or ""

    def write_json(self, path: str, value: object) -> str:
        return self.write(path, json.dumps(value).encode())

    def put_if_absent(self, path: str, data: bytes) -> str | None:
        """Create the object at `path` if there is none; its ETag, or None when one exists."""
        try:
            return obs.put(self._store, self.key(path), data, mode="create")["e_tag"] or ""
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            return None

    def compare_and_swap(self, path: str, data: bytes, etag: str) -> str | None:
        """Replace the object at `path` only if its ETag is still `etag`: the new ETag, or None (changed or gone)."""
        if not self.local:
            try:
                return obs.put(self._store, self.key(path), data, mode={"e_tag": etag})["e_tag"] or ""
            except (PreconditionError, NotFoundError):
                return None
        with self._cas_lock(path):
            try:
                current = obs.head(self._store, self.key(path))["e_tag"]
            except (NotFoundError, FileNotFoundError):
                return None
            if current != etag:
                return None
            return self.write(path, data)

    def delete(self, path: str) -> None:
        """Delete the object at `path` (nothing if there is none)."""
        try:
            obs.delete(self._store, self.key(path))
        except (NotFoundError, FileNotFoundError):
            pass

    def delete_prefix(self, prefix: str) -> None:
        """Delete everything under the folder `prefix`."""
        if self.local:
            shutil.rmtree(prefix, ignore_errors=True)
            return
        keys = [self.key(p) for p in self.objects(prefix)]
        for start in range(0, len(keys), 1000):
            obs.delete(self._store, keys[start : start + 1000])

    def local_dir(self, path: str) -> str | None:
        """`path` as a local folder (made if missing) when the lake is local, else None (use a temporary folder)."""
        if not self.local:
            return None
        os.makedirs(path, exist_ok=True)
        return path

    def mirror_dir(self, local: str, prefix: str) -> int:
        """Make the folder `prefix` of the lake hold what the local folder `local` holds (files put, objects no longer
        there deleted); return how many files were put. For a local lake `prefix` may be `local` itself: nothing.

        A file is put only when it is missing under `prefix` or changed (size, mtime) since this host last mirrored
        it there (`<local>.mirrored.json` remembers), so a mirror costs what changed, not the folder's size.
        """
        if self.local and os.path.realpath(local) == os.path.realpath(prefix):
            return 0
        manifest = Path(local.rstrip("/") + ".mirrored.json")
        mirrored = (json.loads(manifest.read_text()) if manifest.is_file() else {}).get(prefix, {})
        wanted: dict[str, tuple[str, list[int]]] = {}
        for folder, _, names in os.walk(local):
            for name in names:
                full = os.path.join(folder, name)
                stat = os.stat(full)
                wanted[join(prefix, os.path.relpath(full, local))] = (full, [stat.st_size, stat.st_mtime_ns])
        present = set(self.objects(prefix))
        put = [path for path, (_, stamp) in wanted.items() if path not in present or mirrored.get(path) != stamp]
        for path in put:
            with open(wanted[path][0], "rb") as handle:
                self.write(path, handle.read())
        for path in present - wanted.keys():
            self.delete(path)
        manifest.write_text(json.dumps({prefix: {path: stamp for path, (_, stamp) in wanted.items()}}))
        return len(put)

    @contextmanager
    def _cas_lock(self, path: str) -> Iterator[None]:
        folder, name = os.path.split(path)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f".{name}.cas"), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOISE = re.compile(r"^(\d+: |at |<\?xml)")  # a Rust backtrace's frames, an S3 error's XML prologue
_PREFIX = re.compile(r"^(Kernel error|Generic delta kernel error|Generic DeltaTable error)\s*(->|:)\s*")
_S3_ERROR = re.compile(r"<Code>(.*?)</Code>\s*<Message>(.*?)</Message>", re.S)


def refused(what: str, path: str, error: BaseException) -> StorageError:
    """The error that says the store refused to `what` (read, list) `path`, or did not answer, and why."""
    return StorageError(f"cannot {what} {path}: {describe(error)}")


def describe(error: BaseException) -> str:
    """Why a store or delta-rs refused, in one line: the error's first line, then what the server answered (an S3
    error's code and message) or the innermost cause (`Connection refused`); no backtrace, no terminal colours."""
    text = _ANSI.sub("", str(error)).split("\nDebug source:")[0]  # obstore adds a Rust `Debug` dump
    lines = [line.strip().lstrip("\u21b3").strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not _NOISE.match(line)]
    if not lines:
        return type(error).__name__
    head, _, request = _PREFIX.sub("", lines[0]).partition(": Error performing ")  # not the URL and timings
    answer = _S3_ERROR.search(text)
    if answer:
        return f"{head}: {answer[1]}: {answer[2]}"
    if len(lines) > 1:
        return f"{head}: {lines[-1]}"
    return f"{head}: {request.rsplit(' - ', 1)[-1].strip()}" if request else head


def _hidden(path: str) -> bool:
    """Local sidecars (`.<name>.cas`, Spark's `.crc` files) are no objects of the lake."""
    return path.rsplit("/", 1)[-1].startswith(".")


@cache
def _store_for(root: str, aws: tuple[tuple[str, str], ...]) -> Store:
    """One client per lake and AWS configuration (clients are thread-safe and keep their connections)."""
    if not is_object_store(root):
        return Store(root, LocalStore(root, mkdir=True))
    bucket, _, prefix = root[len("s3://") :].partition("/")
    settings = dict(aws)
    config: Any = {k: v for k, v in settings.items() if k != "aws_allow_http"} | {"aws_conditional_put": "etag"}
    client: Any = {"allow_http": True} if settings.get("aws_allow_http") else {}
    return Store(root, S3Store(bucket, prefix=prefix or None, config=config, client_options=client))


def parquet_dataset(path: str) -> pyarrow.dataset.Dataset:
    """The Parquet files under the folder `path` (Spark's staged batches), local or on object storage, as a pyarrow
    dataset (files whose names start with `_` or `.`, such as `_SUCCESS` and `.crc`, are not data)."""
    import pyarrow.dataset

    if not is_object_store(path):
        return pyarrow.dataset.dataset(path, format="parquet")
    return pyarrow.dataset.dataset(
        normalize_root(path)[len("s3://") :],
        format="parquet",
        filesystem=_arrow_s3(tuple(sorted(aws_settings().items()))),
    )


@cache
def _arrow_s3(aws: tuple[tuple[str, str], ...]) -> pyarrow.fs.S3FileSystem:
    """pyarrow's S3 file system with the settings of `aws_settings` (one per configuration), released at exit before
    pyarrow shuts its AWS SDK down: an S3FileSystem still alive then can abort the interpreter (SIGABRT,
    apache/arrow#41087) after a script's work is done (atexit runs the handler registered last first)."""
    from pyarrow.fs import S3FileSystem  # (its import registers pyarrow's own atexit handler)

    atexit.register(_arrow_s3.cache_clear)

    settings = dict(aws)
    options: dict[str, Any] = {
        "access_key": settings.get("aws_access_key_id"),
        "secret_key": settings.get("aws_secret_access_key"),
        "session_token": settings.get("aws_session_token"),
        "region": settings.get("aws_region"),
    }
    endpoint = settings.get("aws_endpoint_url", "")
    if endpoint:
        scheme, _, address = endpoint.rpartition("://")
        options |= {"endpoint_override": address.rstrip("/"), "scheme": scheme or "https"}
    return S3FileSystem(**{k: v for k, v in options.items() if v})


def read_path(path: str) -> bytes | None:
    """The bytes of the object or file at a full path (local, or `s3://bucket/key`), or None when there is none."""
    if not is_object_store(path):
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None
    bucket = normalize_root(path).split("/", 3)[2]
    store = Store.for_lake(f"s3://{bucket}")
    found = store.read(normalize_root(path))
    return None if found is None else found.data
