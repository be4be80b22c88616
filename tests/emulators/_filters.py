"""The small piece of Google's list-filter syntax the emulators understand: comparisons joined by AND.

Anything else (OR, NOT, parentheses, implicit AND) raises FilterError, which the servers turn into
INVALID_ARGUMENT: a test then fails loudly instead of an emulator silently matching everything.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

CLAUSE = re.compile(
    r"""^\s*(?P<field>[A-Za-z_][\w.\-/]*)\s*(?P<op>>=|<=|!=|=|>|<|:)\s*(?P<value>"(?:[^"\\]|\\.)*"|[^\s"()]+)\s*$"""
)
RFC3339 = re.compile(
    r"^(?P<base>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d{1,9}))?(?P<tz>Z|z|[+-]\d{2}:\d{2})$"
)


class FilterError(ValueError):
    pass


def split_and(text: str) -> list[str]:
    """Split on the AND keyword outside double quotes; an empty filter gives no clauses."""
    clauses: list[str] = []
    buf: list[str] = []
    i, quoted, n = 0, False, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and quoted and i + 1 < n:
            buf.append(text[i:i + 2])
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif not quoted and text[i:i + 3] == "AND" and (i == 0 or text[i - 1].isspace()) \
                and (i + 3 == n or text[i + 3].isspace()):
            clauses.append("".join(buf))
            buf = []
            i += 3
            continue
        buf.append(ch)
        i += 1
    if quoted:
        raise FilterError(f"unbalanced quotes in filter {text!r}")
    clauses.append("".join(buf))
    parts = [c.strip() for c in clauses]
    if parts == [""]:
        return []
    if any(not p for p in parts):
        raise FilterError(f"empty clause in filter {text!r}")
    return parts


def parse(text: str) -> list[tuple[str, str, str]]:
    """``a="x" AND b>=y`` -> [("a", "=", "x"), ("b", ">=", "y")], values unquoted."""
    out = []
    for clause in split_and(text):
        m = CLAUSE.match(clause)
        if not m or re.search(r"\s(OR|NOT)\s", f" {clause} "):
            raise FilterError(f"the emulator does not understand filter clause {clause!r} (only FIELD OP VALUE "
                              "joined by AND)")
        out.append((m["field"], m["op"], unquote(m["value"])))
    return out


def unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def rfc3339_ns(value: str) -> int:
    """Nanoseconds since the epoch for an RFC 3339 timestamp (nanosecond precision kept)."""
    m = RFC3339.match(value.strip())
    if not m:
        raise FilterError(f"not an RFC 3339 timestamp: {value!r}")
    tz = "+00:00" if m["tz"] in ("Z", "z") else m["tz"]
    base = datetime.fromisoformat(m["base"] + tz)
    frac = (m["frac"] or "").ljust(9, "0")
    return int(base.timestamp()) * 1_000_000_000 + int(frac)


def datetime_ns(dt: datetime) -> int:
    """Nanoseconds since the epoch for a datetime (proto-plus's DatetimeWithNanoseconds keeps its nanoseconds)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    whole = dt.replace(microsecond=0)
    nanos = getattr(dt, "nanosecond", 0) or dt.microsecond * 1000
    return int(whole.timestamp()) * 1_000_000_000 + nanos


def compare(left: object, op: str, right: object) -> bool:
    if op == "=":
        return left == right
    if op == "!=":
        return left != right
    if op == ">":
        return left > right  # type: ignore[operator]
    if op == ">=":
        return left >= right  # type: ignore[operator]
    if op == "<":
        return left < right  # type: ignore[operator]
    if op == "<=":
        return left <= right  # type: ignore[operator]
    raise FilterError(f"operator {op!r} not supported here")
