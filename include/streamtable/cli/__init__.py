"""Layer 6, the `streamtable` command: `main.py` parses the command line and calls the layers below."""
