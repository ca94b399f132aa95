"""Column types and values for the campaign, drawn at random, and their forms in JSON lines, CSV, Parquet and `show`.

Independent of streamtable on purpose: the model of a generated pipeline computes with these plain Python values
(`decimal.Decimal`, `datetime`, ...), and what `show` prints is derived here from the contract's rules, not from
streamtable's own formatting code.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

NUMERIC = ("int", "long", "float", "double", "decimal")
KEYABLE = ("string", "long", "int", "boolean", "timestamp", "date", "decimal")
SCALARS = ("string", "long", "int", "double", "float", "boolean", "timestamp", "date", "decimal", "binary")
DECIMALS = ((3, 1), (5, 0), (10, 2), (18, 2), (20, 6), (38, 10))
BASE = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
TIME_NAMES = ("event_time", "paid_at", "ts", "t", "when", "happened_at", "time_2", "sent_ms")
STRING_ALPHABET = ["ann", "bob", "cy", "dee", "zoë", "日本", "a,b", 'q"uote', "line\nbreak", " sp ", "42", "null"]


@dataclass(frozen=True)
class T:
    """A column type: a scalar kind, a decimal's precision and scale, an element type, or struct fields."""

    kind: str
    p: int = 0
    s: int = 0
    element: T | None = None
    fields: tuple[tuple[str, T, bool], ...] = field(default=())  # (name, type, nullable)

    def source(self) -> str:
        """The type as a pipeline file declares it with the public API."""
        if self.kind == "decimal":
            return f"Type.decimal({self.p}, {self.s})"
        if self.kind in ("array", "map"):
            assert self.element is not None
            return f"Type.{self.kind}({self.element.source()})"
        if self.kind == "struct":
            cols = ", ".join(
                f"Column({n!r}, {t.source()}{', nullable=True' if nullable else ''})" for n, t, nullable in self.fields
            )
            return f"Type.struct([{cols}])"
        return f"Type.{self.kind.upper()}"

    def total(self) -> T:
        """The type of a sum of this numeric type (the contract: INT -> LONG, FLOAT -> DOUBLE, DECIMAL scale kept)."""
        if self.kind in ("int", "long"):
            return T("long")
        if self.kind in ("float", "double"):
            return T("double")
        return T("decimal", 38, self.s)

    def __str__(self) -> str:
        return self.source()


def draw_type(rng: random.Random, kinds: tuple[str, ...] = SCALARS, depth: int = 0) -> T:
    kind = rng.choice(kinds)
    if kind == "decimal":
        p, s = rng.choice(DECIMALS)
        return T("decimal", p, s)
    if kind in ("array", "map"):
        return T(kind, element=draw_type(rng, SCALARS + (("array", "struct") if depth < 1 else ()), depth + 1))
    if kind == "struct":
        n = rng.randint(1, 3)
        fields = tuple(
            (f"f{i}", draw_type(rng, SCALARS + (("array", "map") if depth < 1 else ()), depth + 1), rng.random() < 0.4)
            for i in range(n)
        )
        return T("struct", fields=fields)
    return T(kind)


def draw_value(rng: random.Random, t: T, small: bool = False, nullable: bool = False) -> object:
    """A value of `t` (None sometimes when `nullable`). `small`: a few distinct values (keys, groups)."""
    if nullable and rng.random() < 0.2:
        return None
    k = t.kind
    if k == "string":
        return rng.choice(STRING_ALPHABET[:4] if small else STRING_ALPHABET)
    if k == "long":
        return rng.choice([1, 2, -7]) if small else rng.choice([rng.randint(-1000, 1000), rng.randint(-(2**40), 2**40)])
    if k == "int":
        return rng.choice([1, 2, -7]) if small else rng.choice([rng.randint(-1000, 1000), 2**31 - 1, -(2**31)])
    if k == "float":
        return rng.randint(-400, 400) / 4  # exact in 32 bits, and so are its sums of a few
    if k == "double":
        return rng.choice([rng.randint(-1000, 1000) / 8, round(rng.uniform(-1e6, 1e6), 3)])
    if k == "decimal":
        if small:  # a few groups: 0, a whole number, and one with every fraction digit
            q = Decimal(1).scaleb(-t.s)
            return rng.choice(
                [Decimal(0), Decimal(min(7, 10 ** (t.p - t.s) - 1)), Decimal("0." + "9" * t.s or "0")]
            ).quantize(q)
        digits = t.p - t.s
        whole = rng.randint(0, 10 ** min(digits, 15) - 1) if digits > 0 else 0
        frac = rng.randint(0, 10**t.s - 1) if t.s else 0
        v = Decimal(whole) + (Decimal(frac) / (Decimal(10) ** t.s) if t.s else 0)
        return (-v if rng.random() < 0.3 else v).quantize(Decimal(1).scaleb(-t.s))
    if k == "boolean":
        return rng.random() < 0.5
    if k == "timestamp":
        return BASE + timedelta(milliseconds=rng.choice([0, 1500, 3_600_000]) if small else rng.randint(0, 10**9))
    if k == "date":
        return date(2026, 1, 31) + timedelta(days=rng.choice([0, 1, 40]) if small else rng.randint(-4000, 4000))
    if k == "binary":
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 6)))
    if k == "array":
        assert t.element is not None
        return [draw_value(rng, t.element, nullable=True) for _ in range(rng.randint(0, 3))]
    if k == "map":
        assert t.element is not None
        return {rng.choice("xyzw") * rng.randint(1, 2): draw_value(rng, t.element, nullable=True) for _ in range(2)}
    if k == "struct":
        return {n: draw_value(rng, ft, nullable=nl) for n, ft, nl in t.fields}
    raise AssertionError(k)


def time_value(rng: random.Random, at: datetime) -> str:
    """A time as an input may write it: `Z`, another offset, or epoch milliseconds (as JSON text)."""
    choice = rng.randrange(3)
    if choice == 0:
        return json.dumps(at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z")
    if choice == 1:
        tz = timezone(timedelta(hours=rng.choice([-5, 2, 9]), minutes=rng.choice([0, 30])))
        return json.dumps(at.astimezone(tz).isoformat(timespec="milliseconds"))
    return str(int((at - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1)))


def json_text(rng: random.Random, t: T, v: object) -> str:
    """`v` as JSON text in an input record: decimals as numbers or strings, times in any accepted form."""
    if v is None:
        return "null"
    k = t.kind
    if k == "decimal":
        text = format(v, "f")
        return text if rng.random() < 0.5 else json.dumps(text)
    if k == "timestamp":
        assert isinstance(v, datetime)
        return time_value(rng, v)
    if k == "date":
        assert isinstance(v, date)
        return json.dumps(v.isoformat())
    if k == "binary":
        assert isinstance(v, bytes)
        return json.dumps(base64.b64encode(v).decode())
    if k in ("float", "double"):
        assert isinstance(v, float)
        return repr(v) if rng.random() < 0.7 or v != int(v) else str(int(v))  # `1` for 1.0 too
    if k == "array":
        assert isinstance(v, list) and t.element is not None
        return "[" + ", ".join(json_text(rng, t.element, x) for x in v) + "]"
    if k == "map":
        assert isinstance(v, dict) and t.element is not None
        return "{" + ", ".join(f"{json.dumps(kk)}: {json_text(rng, t.element, x)}" for kk, x in v.items()) + "}"
    if k == "struct":
        assert isinstance(v, dict)
        parts = [f"{json.dumps(n)}: {json_text(rng, ft, v[n])}" for n, ft, _ in t.fields if v[n] is not None]
        return "{" + ", ".join(parts + ['"extra": 1'] * (rng.random() < 0.3)) + "}"
    return json.dumps(v, ensure_ascii=rng.random() < 0.5)


def csv_cell(rng: random.Random, t: T, v: object) -> str:
    """`v` as a CSV cell: the text a JSON string of it would hold (nested values: their JSON text); null is empty."""
    if v is None:
        return ""
    if t.kind == "string":
        assert isinstance(v, str)
        return v
    if t.kind in ("array", "map", "struct"):
        return json_text(rng, t, v)
    text = json_text(rng, t, v)
    return json.loads(text) if text.startswith('"') else text


def shown(t: T, v: object) -> object:
    """`v` as `show` prints it (the contract's JSON forms)."""
    if v is None:
        return None
    k = t.kind
    if k == "decimal":
        assert isinstance(v, Decimal)
        return format(v.quantize(Decimal(1).scaleb(-t.s)), "f")
    if k == "timestamp":
        assert isinstance(v, datetime)
        v = v.astimezone(UTC)
        return v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"
    if k == "date":
        assert isinstance(v, date)
        return v.isoformat()
    if k == "binary":
        assert isinstance(v, bytes)
        return base64.b64encode(v).decode()
    if k in ("float", "double"):
        return float(v)  # type: ignore[arg-type]
    if k == "array":
        assert isinstance(v, list) and t.element is not None
        return [shown(t.element, x) for x in v]
    if k == "map":
        assert isinstance(v, dict) and t.element is not None
        return {kk: shown(t.element, x) for kk, x in v.items()}
    if k == "struct":
        assert isinstance(v, dict)
        return {n: shown(ft, v[n]) for n, ft, _ in t.fields}
    return v


def arrow_type(rng: random.Random, t: T):
    """A Parquet (Arrow) type for `t`: its own, or one that widens to it without loss."""
    import pyarrow as pa

    k = t.kind
    if k == "decimal":
        return pa.decimal128(t.p, t.s)
    if k == "timestamp":
        return pa.timestamp(rng.choice(["ms", "us"]), tz="UTC")
    if k == "array":
        assert t.element is not None
        return pa.list_(arrow_type(rng, t.element))
    if k == "map":
        assert t.element is not None
        return pa.map_(pa.string(), arrow_type(rng, t.element))
    if k == "struct":
        return pa.struct([pa.field(n, arrow_type(rng, ft)) for n, ft, _ in t.fields])
    return {
        "string": pa.string(),
        "long": pa.int64(),
        "int": pa.int32(),
        "float": pa.float32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        "binary": pa.binary(),
    }[k]


def arrow_value(t: T, v: object) -> object:
    """`v` as pyarrow takes it for `arrow_type(t)` (maps as lists of pairs)."""
    if v is None:
        return None
    if t.kind == "array":
        assert isinstance(v, list) and t.element is not None
        return [arrow_value(t.element, x) for x in v]
    if t.kind == "map":
        assert isinstance(v, dict) and t.element is not None
        return [(kk, arrow_value(t.element, x)) for kk, x in v.items()]
    if t.kind == "struct":
        assert isinstance(v, dict)
        return {n: arrow_value(ft, v[n]) for n, ft, _ in t.fields}
    return v
