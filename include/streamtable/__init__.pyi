# The public API of streamtable, each name listed once (`X as X` is how a stub re-exports a name).
# `__init__.py` imports each on first use (lazy_loader reads this file).

from . import (
    expect as expect,
)
from .core.batch import (
    Batch as Batch,
)
from .core.pipeline import (
    Pipeline as Pipeline,
    Ticks as Ticks,
)
from .core.records import (
    AsOf as AsOf,
    InWindows as InWindows,
    Records as Records,
)
from .core.schema import (
    Column as Column,
    Type as Type,
)
from .core.tables import (
    COMMIT_VERSION as COMMIT_VERSION,
    LINE as LINE,
    Rule as Rule,
    Table as Table,
    at_least as at_least,
    changelog as changelog,
    delta_table as delta_table,
    join_store as join_store,
    non_empty as non_empty,
    one_of as one_of,
    stream as stream,
    table as table,
)
from .operators.aggregate import (
    Aggregate as Aggregate,
    add_to_totals as add_to_totals,
    aggregate as aggregate,
)
from .operators.asof_join import (
    asof_join as asof_join,
)
from .operators.session_windows import (
    SessionWindows as SessionWindows,
    aggregate_sessions as aggregate_sessions,
)
from .operators.stream_join import (
    JoinedWithin as JoinedWithin,
    JoinWindow as JoinWindow,
    join_within as join_within,
    outer_join_within as outer_join_within,
)
from .operators.table_changes import (
    aggregate_table as aggregate_table,
    changed_groups as changed_groups,
    changed_rows as changed_rows,
)
from .operators.table_join import (
    RETRACT as RETRACT,
    table_join as table_join,
    table_left_join as table_left_join,
)
from .operators.windows import (
    Windows as Windows,
    aggregate_in_windows as aggregate_in_windows,
    count_in_windows as count_in_windows,
)
from .storage.reader import query as query, rows as rows

__version__: str
