"""Sphinx settings of the API reference: autodoc of streamtable's public names, written as one Markdown file.

`make reference` (scripts/reference.sh) builds it into docs/reference.md; tests/test_api_reference.py checks that
the file is current and that every public name has its semantics and an example.
"""

project = "streamtable"
extensions = ["sphinx.ext.autodoc", "sphinx_markdown_builder"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
add_module_names = False
autodoc_default_options = {"members": False, "undoc-members": False}
markdown_anchor_sections = True
markdown_anchor_signatures = True
default_role = "code"  # `name` in a docstring is code, as in Markdown


def plain_to_rest(lines: list[str]) -> None:
    """streamtable's docstrings are plain text: an indented block after a blank line is an example (a code block
    here), and an indented line right under a line continues it (one line here)."""
    out: list[str] = []
    in_code = False
    for i, line in enumerate(lines):
        indented = line.startswith("    ")
        after_blank = i == 0 or not lines[i - 1].strip()
        if in_code and line.strip() and not indented:
            in_code = False
        if indented and after_blank and not in_code:
            out += [".. code-block:: python", ""]
            in_code = True
        if indented and not after_blank and not in_code and out:
            out[-1] += " " + line.strip()
            continue
        out.append(line)
    lines[:] = out


def as_written(doc: str) -> list[str]:
    """A docstring's lines, indented as in its source (relative to its closing quotes' line), not as `cleandoc`
    leaves them: a docstring whose only indented lines are an example would lose that indentation."""
    raw = doc.expandtabs().splitlines()
    base = len(raw[-1]) if len(raw) > 1 and not raw[-1].strip() else None
    if base is None:
        return [line.strip() for line in raw]
    return [raw[0].strip()] + [line[base:] if line[:base].isspace() else line.strip() for line in raw[1:-1]]


def process_docstring(app, what, name, obj, options, lines: list[str]) -> None:
    doc = getattr(obj, "__doc__", None)
    if what in ("function", "class", "method") and isinstance(doc, str) and doc.strip():
        lines[:] = as_written(doc) + [""]
    plain_to_rest(lines)


def setup(app) -> None:
    app.connect("autodoc-process-docstring", process_docstring)


smartquotes = False  # the quotes of the docstrings, as written
