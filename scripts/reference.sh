#!/usr/bin/env bash
# The API reference, docs/reference.md, generated from the public names' docstrings (Sphinx autodoc, written as
# Markdown by sphinx-markdown-builder; sources in docs/reference/).
#
#   scripts/reference.sh [OUT]    # default OUT: docs/reference.md (make reference); tests write elsewhere to compare
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/docs/reference.md}"
PY="${STREAMTABLE_VENV:-$ROOT/.venv}/bin/python"
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT

# -E -a: no cache, every page; -W: a warning (a name that does not import, bad markup) fails the build.
"$PY" -m sphinx -q -E -a -b markdown "$ROOT/docs/reference" "$BUILD" -d "$BUILD/.doctrees"
cp "$BUILD/index.md" "$OUT"
