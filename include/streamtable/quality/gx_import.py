"""Importing Great Expectations: once, with analytics off, its logs at WARNING, and what GX imports for expectations
streamtable never declares left to its first use.

Those modules are deferred by a stand-in in `sys.modules` (`_ImportedOnFirstUse`), not by `lazy_loader.load` or
`importlib.util.LazyLoader`: on Python 3.11 their lazy module is loaded by any `import` of its name (the import
system reads its `__spec__`), so GX's own `import altair` would load it at once (measured: GX's import then costs
3.2-3.5 CPU-s instead of 2.5-2.6).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import threading
import types
from functools import lru_cache
from typing import Any

# Modules GX imports when it is imported, for expectations streamtable never declares (the KL-divergence
# expectation's charts: altair; its and the KS tests' statistics: scipy.stats): 0.7-1.3 of the ~3.3 CPU-s of
# importing GX, paid by every driver. They are imported the first time GX uses them instead.
IMPORTED_ON_FIRST_USE = ("altair", "scipy.stats")
_first_use = threading.RLock()  # re-entered if one module imported on first use imports another


class _ImportedOnFirstUse(types.ModuleType):
    """A stand-in in `sys.modules` that imports the module it stands for, and gives it its place, the first time an
    attribute of it is read."""

    def __getattr__(self, attr: str) -> Any:
        with _first_use:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            module = importlib.import_module(self.__name__)
        return getattr(module, attr)


def _import_on_first_use(names: tuple[str, ...]) -> None:
    """Put a stand-in in `sys.modules` for each module of `names` that is installed and not imported yet."""
    for name in names:
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            sys.modules[name] = _ImportedOnFirstUse(name)


_importing = threading.Lock()  # GX's package imports itself in circles: two threads importing it at once can see
# a half-made module (KeyError 'great_expectations.data_context.data_context'), so one imports it, the other waits


@lru_cache(maxsize=1)
def gx() -> Any:
    """The great_expectations module, imported once with analytics off and its logs at WARNING. Call it before
    importing any module of GX: its import may be under way on another thread (`import_gx_in_background`)."""
    with _importing:
        return _import_gx()


def _import_gx() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    _import_on_first_use(IMPORTED_ON_FIRST_USE)
    import great_expectations

    log = logging.getLogger("great_expectations")
    if log.level == logging.NOTSET:
        log.setLevel(logging.WARNING)
    return great_expectations


def import_gx_in_background() -> None:
    """Start importing Great Expectations on a daemon thread, so that its seconds of imports overlap the JVM's start."""
    threading.Thread(target=gx, name="import-great-expectations", daemon=True).start()
