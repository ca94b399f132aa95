"""Copy the Data Docs pages' CDN assets (`streamtable.airflow.web_assets`) from their npm packages into the package.

`make setup` runs it, and so does `make wheel` (without setup): each package's tarball is downloaded once from the
npm registry into a cache (`$XDG_CACHE_HOME` or ~/.cache, `streamtable/npm/`), checked against the integrity hash
npm publishes for it (pinned in web_assets.lock.json, as a package-lock.json pins it), and the files the pages load
are copied into `include/streamtable/airflow/data_docs_assets/` (not in git; in the wheel). Nothing is downloaded
when the files are there. Usage: python scripts/fetch_web_assets.py
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import os
import sys
import tarfile
import urllib.request
from pathlib import Path
from types import ModuleType


def _web_assets() -> ModuleType:
    """streamtable/airflow/web_assets.py, loaded from its file: this script runs before the package is installed
    (the image's wheel stage has nothing but Python), and that module needs only the standard library."""
    path = Path(__file__).resolve().parents[1] / "include" / "streamtable" / "airflow" / "web_assets.py"
    spec = importlib.util.spec_from_file_location("streamtable_web_assets", path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks the module up by name
    spec.loader.exec_module(module)
    return module


_ASSETS = _web_assets()
ASSET_FOLDERS, ASSETS_DIR, WEB_ASSETS = _ASSETS.ASSET_FOLDERS, _ASSETS.ASSETS_DIR, _ASSETS.WEB_ASSETS

REGISTRY = "https://registry.npmjs.org"
# `npm view NAME@VERSION dist.integrity` of each package, as npm's lock files record it (sha512 of the tarball).
LOCK = Path(__file__).with_name("web_assets.lock.json")


def tarball_url(package: str) -> str:
    """`@scope/name@1.2.3` -> https://registry.npmjs.org/@scope/name/-/name-1.2.3.tgz (npm's tarball layout)."""
    name, _, version = package.rpartition("@")
    return f"{REGISTRY}/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"


def tarball(package: str, cache: Path) -> bytes:
    """The package's tarball, from the cache or the registry, checked against its pinned integrity hash."""
    path = cache / (package.replace("/", "+") + ".tgz")
    data = path.read_bytes() if path.exists() else b""
    if not _intact(package, data):
        with urllib.request.urlopen(tarball_url(package), timeout=60) as response:
            data = response.read()
        if not _intact(package, data):
            raise SystemExit(f"fetch_web_assets: {tarball_url(package)} does not match its npm integrity hash")
        cache.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return data


def _intact(package: str, data: bytes) -> bool:
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    return bool(data) and integrity == json.loads(LOCK.read_text())[package]


def _license(path: str) -> bool:
    """The package's license file (LICENSE, LICENSE.txt, ...) and package.json (which names it): shipped too."""
    return path == "package.json" or ("/" not in path and path.upper().startswith(("LICENSE", "LICENCE")))


def wanted(package: str) -> tuple[set[str], tuple[str, ...]]:
    """The files (paths inside the package) and whole folders a page needs from `package`."""
    return {a.file for a in WEB_ASSETS if a.package == package}, ASSET_FOLDERS.get(package, ())


def extract(package: str, data: bytes, target: Path) -> int:
    """Copy the wanted files and the license of the tarball (whose paths start with `package/`) into
    target/PACKAGE/; return how many."""
    files, folders = wanted(package)
    copied = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            path = member.name.split("/", 1)[-1]
            if member.isfile() and (path in files or path.startswith(folders) or _license(path)):
                out = target / package / path
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
                copied += 1
    missing = [f for f in files if not (target / package / f).is_file()]
    if missing:
        raise SystemExit(f"fetch_web_assets: {package} has no {', '.join(missing)}")
    return copied


def present(package: str) -> bool:
    files, folders = wanted(package)
    return all((ASSETS_DIR / package / f).is_file() for f in files) and all(
        (ASSETS_DIR / package / d).is_dir() for d in folders
    )


def main() -> int:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamtable" / "npm"
    packages = sorted({a.package for a in WEB_ASSETS})
    for package in [p for p in packages if not present(p)]:
        print(f"fetch_web_assets: {package}: {extract(package, tarball(package, cache), ASSETS_DIR)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
