"""Spark's types end to end: declared (`Type`), typed from JSON on ingest, kept by operators, printed by `show`.

The record typing is pure Python (no Spark); one test runs a user pipeline over every type in process.
"""

from __future__ import annotations

import json
import re
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from streamtable import Column, Type
from streamtable.core import registry
from streamtable.core.errors import BadInputError, DeclarationError
from streamtable.core.schema import arrow_schema, spark_ddl
from streamtable.core.tables import at_least, changelog, non_empty, one_of, table
from streamtable.ingest.record_parser import RecordError, parse_json, parse_record, typed_value
from streamtable.storage.reader import json_lines

DEC = Type.decimal(3, 1)


def typed(type_: Type, text: str) -> object:
    """The value of a column of `type_` read from the JSON `text`."""
    return typed_value("c", type_, parse_json(text))


def refused(type_: Type, text: str) -> str:
    """The reason a record whose `c` is the JSON `text` is quarantined."""
    spec = changelog("t", [Column("c", type_)], time_column=None)  # type: ignore[arg-type]
    with pytest.raises(RecordError) as e:
        parse_record(spec, '{"c": ' + text + "}")
    return str(e.value)


def test_double_and_float_take_any_json_number_and_refuse_what_is_not_a_finite_one():
    assert typed(Type.DOUBLE, "1") == 1.0 and isinstance(typed(Type.DOUBLE, "1"), float)
    assert typed(Type.DOUBLE, "1.5") == 1.5
    assert typed(Type.DOUBLE, "-2.5e-3") == -0.0025
    assert typed(Type.FLOAT, "1.25") == 1.25
    assert "out of the range of a double" in refused(Type.DOUBLE, "1e400")
    assert "out of the range of a double" in refused(Type.DOUBLE, "1" + "0" * 400)
    assert "out of the range of a float" in refused(Type.FLOAT, "1e39")
    for constant in ("NaN", "Infinity", "-Infinity"):
        assert refused(Type.DOUBLE, constant).startswith("malformed JSON")
    for wrong in ('"1.5"', "true", "[1.5]"):
        assert "should be a double" in refused(Type.DOUBLE, wrong)


def test_long_and_int_take_json_integers_in_range_only():
    assert typed(Type.LONG, "-9223372036854775808") == -(2**63)
    assert typed(Type.INT, "2147483647") == 2**31 - 1
    assert refused(Type.LONG, "1.0") == "c should be a long, got 1.0"
    assert refused(Type.INT, "1e2") == "c should be an int, got 1E+2"
    assert "does not fit a 64-bit integer" in refused(Type.LONG, "9223372036854775808")
    assert "does not fit a 32-bit integer" in refused(Type.INT, "-2147483649")
    assert "should be an int" in refused(Type.INT, "true")


def test_decimal_is_exact_from_a_number_or_a_string_of_digits_never_through_a_float():
    assert typed(DEC, "1.50") == Decimal("1.5") and typed(DEC, "1.50").as_tuple().exponent == -1
    assert typed(DEC, '"12.3"') == Decimal("12.3")
    assert typed(DEC, "-99.9") == Decimal("-99.9")
    assert typed(DEC, "7") == Decimal("7.0")
    assert typed(Type.decimal(5, 2), "1e2") == Decimal("100.00")
    assert typed(Type.decimal(38, 18), "0.100000000000000000") == Decimal("0.1")  # a float would be 0.1000...0555
    assert typed(Type.decimal(38, 0), "9" * 38) == Decimal("9" * 38)  # beyond a double's 53 bits
    for inexact in ("1.55", "123.4", "99.99", '"1.55"', "1e400", "1e-400"):
        assert "does not fit a decimal(3,1) exactly" in refused(DEC, inexact), inexact
    for wrong in ('"1e2"', '"1,5"', '" 1.5"', '"+1.5"', '""', "true"):
        assert "should be a decimal(3,1)" in refused(DEC, wrong), wrong


def test_a_wrong_value_is_shown_as_json_so_a_string_is_told_from_a_number():
    """`"qty": "1"` read `qty should be a long, got 1`, as the number 1 would: a value is shown as JSON, a string
    quoted (one with an unpaired surrogate escaped: raw, it failed the quarantine's write)."""
    assert refused(Type.LONG, '"1"') == 'c should be a long, got "1"'
    assert refused(Type.BOOLEAN, '"true"') == 'c should be a boolean, got "true"'
    assert refused(Type.STRING, "1") == "c should be a string, got 1"
    assert refused(Type.DATE, '"2026-02-30"') == 'c: "2026-02-30" is not a date'
    assert refused(Type.BINARY, '"AAH"') == 'c: "AAH" is not base64'
    assert refused(Type.LONG, '"café"') == 'c should be a long, got "café"'
    assert refused(Type.DOUBLE, '"\\ud800"') == 'c should be a double, got "\\ud800"'
    assert refused(Type.TIMESTAMP, '"x"').startswith("c: ") and '"' not in refused(Type.TIMESTAMP, '"x"')


def test_date_binary_boolean_and_timestamp():
    assert typed(Type.DATE, '"2026-01-31"') == date(2026, 1, 31)
    assert "not a date" in refused(Type.DATE, '"2026-02-30"')
    for wrong in ('"20260131"', '"2026-01-31T00:00:00"', "20260131"):
        assert "should be a date" in refused(Type.DATE, wrong), wrong
    assert typed(Type.BINARY, '"AAH/"') == b"\x00\x01\xff"
    assert typed(Type.BINARY, '""') == b""
    assert "is not base64" in refused(Type.BINARY, '"AAH"')
    assert "is not base64" in refused(Type.BINARY, '"AA H/"')
    assert typed(Type.BOOLEAN, "false") is False
    assert typed(Type.TIMESTAMP, "0").year == 1970
    from streamtable.core.timefmt import format_time  # every year of four digits: `1-01-01T...` is no ISO-8601

    early = typed(Type.TIMESTAMP, '"0001-01-01T00:00:00.123456Z"')
    assert format_time(early) == "0001-01-01T00:00:00.123Z" and format_time(early.replace(year=999))[:4] == "0999"


def test_arrays_maps_and_structs_nest_to_any_depth_and_name_the_wrong_value():
    point = Type.struct([Column("x", Type.DOUBLE), Column("label", Type.STRING, nullable=True)])
    deep = Type.array(Type.map(Type.array(point)))
    value = typed(deep, '[{"a": [{"x": 1, "extra": true}, {"x": 0.5, "label": "p"}]}, {}]')
    assert value == [{"a": [{"x": 1.0, "label": None}, {"x": 0.5, "label": "p"}]}, {}]
    assert typed(Type.array(Type.LONG), "[1, null, 3]") == [1, None, 3]  # elements and map values may be null
    assert typed(Type.map(DEC), '{"k": 1.50}') == {"k": Decimal("1.5")}
    assert refused(deep, '[{"a": [{"label": "p"}]}]') == "missing field c[0].a[0].x"
    assert refused(deep, '[{"a": [{"x": null}]}]') == "c[0].a[0].x is null"
    assert refused(deep, '[{"a": [{"x": "1"}]}]') == 'c[0].a[0].x should be a double, got "1"'
    assert refused(Type.map(DEC), '{"k": 1.55}') == "c.k 1.55 does not fit a decimal(3,1) exactly"
    assert "should be an array<long>" in refused(Type.array(Type.LONG), '{"a": 1}')
    assert "should be a map<string, long>" in refused(Type.map(Type.LONG), "[1]")
    # a key named twice has no one value: the record is refused, at any depth, never read as its last value
    assert refused(Type.map(Type.LONG), '{"k": 1, "k": 2}') == 'malformed JSON: the key "k" appears twice in one object'
    spec = changelog("t", [Column("c", Type.LONG)], time_column=None)  # type: ignore[arg-type]
    with pytest.raises(RecordError, match='the key "c" appears twice'):
        parse_record(spec, '{"c": 1, "c": 2}')
    # every typed value is one pyarrow takes for the declared type
    row = {"c": value}
    assert pa.Table.from_pylist([row], schema=arrow_schema((Column("c", deep),))).to_pylist(maps_as_pydicts="strict")


def test_declarations_render_for_arrow_and_spark_and_keys_are_checked():
    columns = (
        Column("s", Type.STRING),
        Column("n", Type.INT),
        Column("d", Type.decimal(10, 2)),
        Column("on", Type.DATE),
        Column("m", Type.map(Type.array(Type.struct([Column("x", Type.FLOAT)])))),
    )
    assert spark_ddl(columns) == (
        "`s` STRING, `n` INT, `d` DECIMAL(10,2), `on` DATE, `m` MAP<STRING, ARRAY<STRUCT<`x`: FLOAT>>>"
    )
    assert arrow_schema(columns).field("d").type == pa.decimal128(10, 2)
    assert arrow_schema(columns).field("on").type == pa.date32()
    assert Type.decimal(10, 2) == Type.decimal(10, 2) and Type.LONG == Type("long")
    assert repr(Type.decimal(10, 2)) == "Type.decimal(10, 2)" and repr(Type.STRING) == "Type.STRING"
    assert Type.decimal(10, 2).value == "decimal(10,2)"
    for key_type in (Type.DOUBLE, Type.FLOAT, Type.BINARY, Type.array(Type.LONG), Type.map(Type.LONG), columns[4].type):
        with pytest.raises(DeclarationError, match="cannot be a key"):
            table("t", [Column("k", key_type), Column("v", Type.LONG)], keys=["k"])
    for key_type in (Type.INT, Type.DATE, Type.decimal(10, 2), Type.BOOLEAN, Type.TIMESTAMP):
        table("t", [Column("k", key_type), Column("v", Type.LONG)], keys=["k"])
    for bad in ((0, 0), (39, 2), (5, 6), (5, -1)):
        with pytest.raises(DeclarationError):
            Type.decimal(*bad)
    with pytest.raises(DeclarationError):
        Type.struct([])
    with pytest.raises(DeclarationError):
        Column("c", "long")  # type: ignore[arg-type]


def test_a_column_name_with_a_dot_is_refused_where_it_is_declared_and_spaces_and_capitals_are_kept():
    """`Column("unit.price", ...)` was taken, then every run failed at `batch.new` with Spark's UNRESOLVED_COLUMN
    (its select read the name as a struct's field), a line that did not name the fix; the file is now broken at the
    declaration's line, naming the name to use. Spaces and capitals stay allowed (quoted in Spark's DDL)."""
    refused = r"^column 'unit\.price': .* may not hold a '\.' .*: name it 'unit_price'$"
    with pytest.raises(DeclarationError, match=refused):
        Column("unit.price", Type.decimal(10, 2))
    with pytest.raises(DeclarationError, match="may not hold"):
        Type.struct([Column("a.b", Type.LONG)])
    assert spark_ddl((Column("Unit Price", Type.LONG),)) == "`Unit Price` BIGINT"


def test_a_field_naming_a_column_in_another_case_quarantines_its_record_where_it_would_read_as_null():
    """`{"Region": "eu"}` for the nullable `region` was taken with region null (the field ignored as undeclared),
    exit 0; its record is now quarantined naming the field and the fix, in a struct too. Other extra fields are
    still ignored, and an exact name wins over a near one."""
    t = changelog(
        "near_names",
        [
            Column("user", Type.STRING),
            Column("region", Type.STRING, nullable=True),
            Column("payer", Type.struct([Column("country", Type.STRING, nullable=True)]), nullable=True),
            Column("event_time", Type.TIMESTAMP),
        ],
    )
    at = {"event_time": "2026-03-01T10:00:00Z"}
    for fields, reason in (
        ({"user": "ann", "Region": "eu"}, "region: the record names it 'Region'; names match exactly, so rename"),
        ({"user": "ann", " region": "eu"}, "region: the record names it ' region'; names match exactly, so rename"),
        ({"user": "ann", "payer": {"Country": "fr"}}, "payer.country: the record names it 'Country'; names match"),
        ({"User": "bob"}, "user: the record names it 'User'"),
    ):
        with pytest.raises(RecordError, match=re.escape(reason)):
            parse_record(t, json.dumps({**at, **fields}))
    kept = parse_record(t, json.dumps({**at, "user": "ann", "region": "eu", "Region": "us", "age": 40}))
    assert (kept["region"], kept["payer"]) == ("eu", None)


def test_a_rule_whose_value_its_column_never_compares_with_is_refused_where_it_is_declared():
    """`one_of("day", ["2026-03-01"])` on a DATE quarantined every record (a date is never that str), exit 0;
    `at_least("day", "2026-01-01")` failed each ingest with a TypeError; `non_empty` on a number never fired. Each is
    now refused at its declaration, naming what to give; values of the column's kind still work."""
    from datetime import UTC, datetime

    columns = [
        Column("who", Type.STRING),
        Column("day", Type.DATE),
        Column("amount", Type.decimal(5, 2)),
        Column("event_time", Type.TIMESTAMP),
    ]
    for rule, refused in (
        (one_of("day", ["2026-03-01"]), "one_of on 'day' (date) with '2026-03-01': give a datetime.date"),
        (at_least("day", "2026-01-01"), "at_least on 'day' (date) with '2026-01-01': give a datetime.date"),
        (at_least("amount", "0"), "at_least on 'amount' (decimal(5,2)) with '0': give a number"),
        (at_least("event_time", datetime(2026, 1, 1)), "datetime(2026, 1, 1, 0, 0): give a datetime with"),
        (one_of("who", [1]), "one_of on 'who' (string) with 1: give a str"),
        (non_empty("amount"), "non_empty on 'amount', which is not a STRING"),
    ):
        with pytest.raises(DeclarationError, match=re.escape(refused)):
            changelog("rule_probe", columns, rules=[rule])
    since = datetime(2026, 1, 1, tzinfo=UTC)
    ok = [at_least("day", date(2026, 1, 1)), at_least("amount", 0), at_least("event_time", since)]
    t = changelog("rule_probe", columns, rules=[*ok, one_of("who", ["ann"]), non_empty("who")])
    record = {"who": "ann", "day": "2026-03-01", "amount": "0.05", "event_time": "2026-03-01T00:00:00Z"}
    assert parse_record(t, json.dumps(record))["amount"] == Decimal("0.05")


def test_a_float_bound_of_a_decimal_column_s_rule_is_the_decimal_it_was_written_as():
    """`at_least("price", 0.1)` quarantined a price of 0.10 ("price is 0.10, below 0.1"): the exact decimal was
    compared with the float 0.1000000000000000055...; `one_of("size", [1.1])` refused 1.1 ("size is Decimal('1.1')")."""
    columns = [
        Column("price", Type.decimal(10, 2)),
        Column("size", Type.decimal(4, 1)),
        Column("event_time", Type.TIMESTAMP),
    ]
    prices = changelog("prices_probe", columns, rules=[at_least("price", 0.1), one_of("size", [0.5, 1.1, 2.0])])

    def reason(price: str, size: str) -> str | None:
        record = {"price": price, "size": size, "event_time": "2026-03-01T00:00:00Z"}
        try:
            parse_record(prices, json.dumps(record))
        except RecordError as e:
            return str(e)
        return None

    assert reason("0.10", "1.1") is None and reason("0.1", "2") is None and reason("5.00", "0.5") is None
    assert reason("0.09", "1.1") == "price is 0.09, below 0.1"
    assert reason("0.10", "1.2") == "size is 1.2, not one of 0.5, 1.1, 2.0"


def test_a_table_named_as_no_path_can_be_is_refused_where_it_is_declared():
    """`table("Hourly Orders", ...)` was taken and its first run committed; the next run failed reading it back
    (Spark's PATH_NOT_FOUND at `Hourly%20Orders/part-...`), the table unusable. A table's name is now a pipeline's:
    lower-case letters, digits and _."""
    for name in ("Hourly Orders", "hourly-orders", "Hourly", "1st", ""):
        with pytest.raises(DeclarationError, match=rf"^table {name!r}: a name is lower-case letters, digits and _"):
            table(name, [Column("k", Type.STRING)], keys=["k"])
    assert table("hourly_orders_2", [Column("k", Type.STRING)], keys=["k"]).name == "hourly_orders_2"


def test_a_total_past_its_columns_declared_digits_fails_naming_the_table_column_and_what_to_do(tmp_path):
    """Revenue declared DECIMAL(6, 2) reaching 10000.00: the batch failed with Arrow's bare `ArrowInvalid: Decimal
    value does not fit in precision 6`, naming no table or column (staged rows are read back as the declared types)."""
    import pyarrow.parquet as pq

    from streamtable.core.errors import OutputTypeError
    from streamtable.storage.staged_rows import staged_rows

    staged = tmp_path / "staging" / "7" / "revenue"
    staged.mkdir(parents=True)
    totals = {"customer": pa.array(["a"]), "amount": pa.array([Decimal("10000.00")], pa.decimal128(38, 2))}
    pq.write_table(pa.table(totals), staged / "part-0.parquet")
    declared = arrow_schema((Column("customer", Type.STRING), Column("amount", Type.decimal(6, 2))))
    with pytest.raises(OutputTypeError) as e:
        staged_rows(str(staged), declared).read_all()
    assert str(e.value) == (
        "revenue: column amount (decimal128(6, 2)) cannot hold a value of this batch (Decimal value does not fit in "
        "precision 6): declare it wider (a total of DECIMAL(p, s) is a DECIMAL(38, s)); `streamtable reprocess "
        "PIPELINE --from-version 0` applies a changed type"
    )


def test_a_commit_of_a_total_past_its_declared_digits_fails_with_that_one_line_not_delta_rs_s_text(tmp_path):
    """The same batch committed by delta-rs (an output no gate reads first: a session's totals): the reader's error
    reached Python inside a DeltaError's text, among Arrow's and a traceback (exit 1, "retry")."""
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    from streamtable.core.errors import OutputTypeError
    from streamtable.storage.delta_rs import DELETE, append_staged, merge_staged

    declared = arrow_schema((Column("customer", Type.STRING), Column("amount", Type.decimal(6, 2))))
    too_wide = {"customer": pa.array(["a"]), "amount": pa.array([Decimal("10000.00")], pa.decimal128(38, 2))}
    for commit, extra in ((append_staged, {}), (merge_staged, {DELETE: pa.array([False])})):
        path, staged = tmp_path / f"{commit.__name__}_revenue", tmp_path / commit.__name__ / "revenue"
        staged.mkdir(parents=True)
        pq.write_table(pa.table(too_wide | extra), staged / "part-0.parquet")
        write_deltalake(str(path), declared.empty_table())
        arguments = (str(path), str(staged), ["customer"]) if commit is merge_staged else (str(path), str(staged))
        with pytest.raises(OutputTypeError) as e:
            commit(*arguments, "app", 1)
        assert str(e.value).startswith("revenue: column amount (decimal128(6, 2)) cannot hold a value of this batch")
        assert "\n" not in str(e.value)


def test_show_prints_decimals_as_strings_of_their_scale_dates_binary_and_doubles_as_numbers():
    columns = (
        Column("d", Type.decimal(5, 2)),
        Column("z", Type.decimal(12, 10)),
        Column("on", Type.DATE),
        Column("b", Type.BINARY),
        Column("x", Type.DOUBLE),
        Column("m", Type.map(Type.decimal(3, 1))),
    )
    row = {
        c.name: typed_value(c.name, c.type, v)
        for c, v in zip(columns, [Decimal("1.5"), 0, "2026-01-31", "AAH/", Decimal("0.1"), {"k": 2}], strict=True)
    }
    stored = pa.Table.from_pylist([row], schema=arrow_schema(columns)).to_pylist(maps_as_pydicts="strict")
    assert json.loads(next(json_lines(stored))) == {
        "d": "1.50",
        "z": "0.0000000000",
        "on": "2026-01-31",
        "b": "AAH/",
        "x": 0.1,
        "m": {"k": "2.0"},
    }


PIPELINE = """

from streamtable import Column, Pipeline, Type, add_to_totals, changelog, stream, table

POINT = Type.struct([Column("x", Type.DOUBLE), Column("label", Type.STRING, nullable=True)])
ALL = [
    Column("id", Type.STRING),
    Column("day", Type.DATE),
    Column("n", Type.INT),
    Column("big", Type.LONG),
    Column("price", Type.decimal(10, 2)),
    Column("ratio", Type.DOUBLE),
    Column("f", Type.FLOAT),
    Column("ok", Type.BOOLEAN),
    Column("blob", Type.BINARY),
    Column("tags", Type.array(Type.STRING)),
    Column("attrs", Type.map(Type.decimal(5, 1))),
    Column("points", Type.array(POINT)),
    Column("event_time", Type.TIMESTAMP),
]
ITEMS = changelog("items", ALL)


def process(batch):
    items = batch.new("items")
    batch.append("items_seen", items.select(*[c.name for c in ALL]))
    batch.upsert("price_by_day", add_to_totals(batch.current("price_by_day"), items, ["day"], "price"))
    batch.upsert("ratio_by_id", add_to_totals(batch.current("ratio_by_id"), items, ["id"], "ratio"))
    batch.upsert("n_by_price", add_to_totals(batch.current("n_by_price"), items, ["price"], "n"))


PIPELINE = Pipeline(
    name="types",
    doc="every type through a pipeline",
    streams=("items",),
    outputs=(
        stream("items_seen", ALL, time_column="event_time"),
        table("price_by_day", [Column("day", Type.DATE), Column("price", Type.decimal(10, 2))], keys=["day"]),
        table("ratio_by_id", [Column("id", Type.STRING), Column("ratio", Type.DOUBLE)], keys=["id"]),
        table("n_by_price", [Column("price", Type.decimal(10, 2)), Column("n", Type.LONG)], keys=["price"]),
    ),
    process=process,
)
"""


@pytest.fixture
def types_pipeline(tmp_path: Path, monkeypatch):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "types.py").write_text(PIPELINE)
    monkeypatch.setenv(registry.ENV, str(folder))
    registry.current.cache_clear()
    yield
    registry.current.cache_clear()


def test_every_type_round_trips_through_ingest_a_pipeline_and_show(spark, types_pipeline, tmp_path):
    from streamtable.ingest.files import ingest_lines
    from streamtable.runtime.commands.lifecycle import run
    from streamtable.storage.lake import Lake
    from streamtable.storage.reader import query, rows

    lake = Lake(tmp_path / "lake")
    first = {
        "id": "a",
        "day": "2026-01-31",
        "n": 1,
        "big": 2**62,
        "price": 0.1,
        "ratio": 0.1,
        "f": 1.1,  # a FLOAT: shown as 1.1, not as the 32-bit float 1.100000023841858
        "ok": True,
        "blob": "AAH/",
        "tags": ["x", "y"],
        "attrs": {"w": 1.5},
        "points": [{"x": 1, "label": "p", "extra": 1}, {"x": -0.5}],
        "event_time": "2026-01-31T10:00:00Z",
    }
    second = first | {"n": 2, "price": "0.20", "ratio": 0.2, "tags": [], "attrs": {}, "points": []}
    second["event_time"] = "2026-01-31T10:00:01Z"
    bad = [first | {"price": 0.125}, first | {"ratio": 1e400}, first | {"day": "31/01/2026"}, first | {"n": 1.0}]
    result = ingest_lines(lake, "items", [json.dumps(first), json.dumps(second), *map(json.dumps, bad)])
    assert (result.appended, result.quarantined) == (2, 4)
    run(lake, "types")

    shown = [json.loads(line) for line in json_lines(rows(lake, "items_seen"))]
    assert shown == [
        first
        | {"price": "0.10", "attrs": {"w": "1.5"}, "event_time": "2026-01-31T10:00:00.000Z"}
        | {"points": [{"x": 1.0, "label": "p"}, {"x": -0.5, "label": None}]},
        second | {"price": "0.20", "event_time": "2026-01-31T10:00:01.000Z"},
    ]
    # sums keep their type family: DECIMAL(10,2) exactly, DOUBLE as a double, INT as a LONG
    assert [json.loads(line) for line in json_lines(query(lake, "price_by_day", "2026-01-31"))] == [
        {"day": "2026-01-31", "price": "0.30"}
    ]
    assert [json.loads(line) for line in json_lines(query(lake, "ratio_by_id", "a"))] == [
        {"id": "a", "ratio": 0.1 + 0.2}
    ]
    assert (
        query(lake, "n_by_price", "0.1") == query(lake, "n_by_price", '"0.10"') == [{"price": Decimal("0.10"), "n": 1}]
    )
    assert [r["n"] for r in query(lake, "n_by_price", "0.20")] == [2]
    with pytest.raises(BadInputError, match="is not a decimal"):
        query(lake, "n_by_price", "0.125")
    with pytest.raises(BadInputError, match="is not a date"):
        query(lake, "price_by_day", "2026-1-31")


def test_a_staged_value_that_would_not_commit_as_itself_is_refused_before_any_output_commits(tmp_path):
    """A merge-on-read commit (Spark's MERGE) rounded 0.625 into DECIMAL(12, 2) as 0.63, exit 0, where delta-rs
    refused it; a DOUBLE sum past its range was committed as Infinity, which `show` printed as JSON no reader takes.
    The batch's staged rows are now checked whole, before any output commits: both are refused in one line."""
    import pyarrow.parquet as pq

    from streamtable.core.errors import OutputTypeError
    from streamtable.storage.staged_rows import refuse_misfits

    declared = arrow_schema((Column("k", Type.STRING), Column("amt", Type.decimal(12, 2)), Column("d", Type.DOUBLE)))
    cases = {
        "fits": ([Decimal("0.600")], [1.5], None),
        "nulls": ([None], [None], None),
        "rounded": ([Decimal("0.625")], [1.5], "column amt (decimal128(12, 2)) cannot hold a value of this batch"),
        "infinite": ([Decimal("0.60")], [float("inf")], "column d (double) holds NaN or Infinity in this batch"),
        "nan": ([Decimal("0.60")], [float("nan")], "column d (double) holds NaN or Infinity in this batch"),
    }
    for name, (amounts, doubles, refusal) in cases.items():
        staged = tmp_path / name / "half_out"
        staged.mkdir(parents=True)
        given = {"k": ["a"], "amt": pa.array(amounts, pa.decimal128(38, 3)), "d": pa.array(doubles, pa.float64())}
        pq.write_table(pa.table(given), staged / "part-0.parquet")
        if refusal is None:
            refuse_misfits(str(staged), declared)
            continue
        with pytest.raises(OutputTypeError) as e:
            refuse_misfits(str(staged), declared)
        assert str(e.value).startswith(f"half_out: {refusal}"), e.value
        assert ("F.round(column, s)" in str(e.value)) == (name == "rounded")  # a scale's advice: round it


TWO_TOTALS = """
from streamtable import Column, Pipeline, Type, add_to_totals, changelog, table

IN = changelog("two_in", [Column("k", Type.STRING), Column("n", Type.INT), Column("event_time", Type.TIMESTAMP)])


TOTALS = {"two_long": Type.LONG, "two_int": Type.INT}  # committed in this order


def process(batch):
    for name in TOTALS:
        batch.upsert(name, add_to_totals(batch.current(name), batch.new("two_in"), ["k"], "n"))


OUTPUTS = tuple(table(name, [Column("k", Type.STRING), Column("n", kind)], keys=["k"]) for name, kind in TOTALS.items())
PIPELINE = Pipeline(name="two", doc="LONG and INT totals", streams=("two_in",), outputs=OUTPUTS, process=process)
"""


def test_a_batch_one_output_of_which_cannot_hold_its_total_publishes_none_of_them(spark, tmp_path, monkeypatch):
    """Before, the LONG total committed 4000000000 and the INT one then refused the batch, at every later run too:
    two outputs of one pipeline disagreed for good."""
    from streamtable.core.errors import OutputTypeError
    from streamtable.ingest.files import ingest_lines
    from streamtable.runtime.commands.lifecycle import run
    from streamtable.storage.lake import Lake
    from streamtable.storage.reader import rows

    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "two.py").write_text(TWO_TOTALS)
    monkeypatch.setenv(registry.ENV, str(folder))
    registry.current.cache_clear()
    lake = Lake(tmp_path / "lake")
    record = {"k": "a", "n": 2_000_000_000, "event_time": "2026-03-01T10:00:00Z"}
    try:
        ingest_lines(lake, "two_in", [json.dumps(record)])
        run(lake, "two")
        ingest_lines(lake, "two_in", [json.dumps(record | {"event_time": "2026-03-01T10:01:00Z"})])
        with pytest.raises(OutputTypeError, match=r"^two_int: column n \(int32\) cannot hold a value of this batch"):
            run(lake, "two")
        assert rows(lake, "two_long") == rows(lake, "two_int") == [{"k": "a", "n": 2_000_000_000}]
    finally:
        registry.current.cache_clear()
