"""docs/reference.md, the API reference, is generated from the docstrings (`make reference`) and stays complete.

Every public name (`streamtable.__all__`, `streamtable.expect.__all__`, `streamtable.testing.__all__`) has a
section that states its semantics and shows an example (a code block), and the committed file is what
`scripts/reference.sh` makes of the current docstrings.
"""

from __future__ import annotations

import re
import subprocess

import streamtable
import streamtable.expect
import streamtable.testing
from helpers import ROOT

REFERENCE = ROOT / "docs" / "reference.md"
CONSTANTS = {"streamtable.LINE", "streamtable.COMMIT_VERSION", "streamtable.RETRACT"}  # values: no example


def public_names() -> set[str]:
    names = {f"streamtable.{n}" for n in streamtable.__all__ if n != "expect"}
    names |= {f"streamtable.expect.{n}" for n in streamtable.expect.__all__}
    return names | {f"streamtable.testing.{n}" for n in streamtable.testing.__all__}


def sections() -> dict[str, str]:
    """Each documented name (its anchor, `<a id="streamtable.NAME">`) -> the text up to the next name's."""
    text = REFERENCE.read_text()
    found = list(re.finditer(r'<a id="(streamtable(?:\.\w+)+)"></a>', text))
    ends = [m.start() for m in found[1:]] + [len(text)]
    return {m.group(1): text[m.end() : end] for m, end in zip(found, ends, strict=True)}


def test_every_public_name_has_a_section_with_its_semantics_and_an_example():
    documented = sections()
    missing = sorted(public_names() - set(documented))
    assert missing == [], f"not in docs/reference.md (add them to docs/reference/index.rst): {missing}"
    for name in sorted(public_names()):
        body = documented[name]
        prose = [line for line in body.splitlines()[2:] if line.strip() and not line.startswith(("#", "<a"))]
        assert prose, f"{name}: no docstring"
        if name not in CONSTANTS:
            assert "```python" in body, f"{name}: its docstring shows no example (an indented block after a blank line)"


def test_the_reference_is_what_the_docstrings_make(tmp_path):
    out = tmp_path / "reference.md"
    proc = subprocess.run(
        [str(ROOT / "scripts" / "reference.sh"), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == REFERENCE.read_text(), "docs/reference.md is out of date: run `make reference`"
