"""`streamtable jars fetch`: the jars a Spark job needs, downloaded once from a Maven repository.

Exactly the artifacts `settings.JARS` pins (Delta's; with `--with s3a`, Hadoop's S3 connector and the AWS SDK into
`DEST/s3a/`), as plain downloads: `REPOSITORY/GROUP/ARTIFACT/VERSION/ARTIFACT-VERSION.jar`, checked against the
repository's `.sha1` when it has one, written whole or not at all. Any URL urllib opens is a repository: Maven
Central (the default), a mirror or proxy of it (`--repository`, or `$STREAMTABLE_MAVEN_REPOSITORY`), or a local
`file://` folder laid out like one (`~/.m2/repository`). A jar already in DEST is kept.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

from streamtable.core.errors import SetupError
from streamtable.runtime import spark_settings as settings

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "STREAMTABLE_MAVEN_REPOSITORY"


def default_repository() -> str:
    return os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL


def artifact_url(repository: str, group: str, artifact: str, version: str) -> str:
    base = repository if "://" in repository else Path(repository).resolve().as_uri()  # a plain folder too
    return f"{base.rstrip('/')}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"


def _read(url: str, timeout: float = 300) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310  (the user's repository)
        return response.read()


def _download(url: str, target: Path) -> str:
    """Stream `url` into `target` (the AWS SDK bundle is 640 MB: never whole in memory); its SHA-1."""
    digest = hashlib.sha1()
    with urllib.request.urlopen(url, timeout=300) as response, target.open("wb") as out:  # noqa: S310
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _expected_sha1(url: str) -> str | None:
    """The repository's SHA-1 of `url`'s file, or None when it publishes none."""
    try:
        text = _read(url + ".sha1", timeout=60).decode("ascii", "replace").strip()
    except (urllib.error.URLError, OSError):
        return None
    return text.split()[0].lower() if text else None


def fetch(repository: str, dest: Path, groups: tuple[str, ...] = ("delta",), force: bool = False) -> dict:
    """Download the jars of `groups` (keys of settings.JARS) into `dest` (the s3a ones into `dest/s3a`).

    Returns {"dest", "repository", "fetched": [paths], "present": [paths]}; SetupError names an artifact that
    could not be had (not in the repository, a checksum that does not match).
    """
    fetched: list[str] = []
    present: list[str] = []
    for group_name in groups:
        if group_name not in settings.JARS:
            raise SetupError(f"unknown jar set {group_name!r} (known: {', '.join(settings.JARS)})")
        folder = dest if group_name == "delta" else dest / group_name
        folder.mkdir(parents=True, exist_ok=True)
        for group, artifact, version in settings.JARS[group_name]:
            target = folder / f"{artifact}-{version}.jar"
            if target.is_file() and not force:
                present.append(str(target))
                continue
            url = artifact_url(repository, group, artifact, version)
            partial = target.with_name(target.name + ".partial")
            try:
                try:
                    sha1 = _download(url, partial)
                except (urllib.error.URLError, OSError) as e:
                    raise SetupError(f"cannot download {group}:{artifact}:{version} from {url}: {e}") from None
                expected = _expected_sha1(url)
                if expected is not None and sha1 != expected:
                    raise SetupError(f"{url}: SHA-1 {sha1} is not the repository's {expected}")
                partial.replace(target)  # a job never sees half a jar
            finally:
                partial.unlink(missing_ok=True)
            fetched.append(str(target))
    return {"dest": str(dest), "repository": repository, "fetched": fetched, "present": present}
