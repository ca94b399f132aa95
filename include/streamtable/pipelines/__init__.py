"""The built-in pipelines, one module each, written with streamtable's public API only (so they double as examples).

`streamtable.core.registry` loads them as it loads the user's pipeline files.
"""
