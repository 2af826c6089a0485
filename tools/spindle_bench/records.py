"""Benchmark records: their fields, validation and loading (see the
package's "Records")."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from .diagnostics import warn


def _is_number(value: Any) -> bool:
    """True for a finite int or float (bool is not a number here)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


# Required fields and the check each value must pass, with what to say if not.
_REQUIRED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "suite": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "workload": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "variant": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "params": (lambda v: isinstance(v, dict), "an object"),
    "metric": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "higher_is_better": (lambda v: isinstance(v, bool), "true or false"),
    "median": (_is_number, "a finite number"),
    "min": (_is_number, "a finite number"),
    "max": (_is_number, "a finite number"),
    "reps": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
             "an integer >= 1"),
}

_OPTIONAL: dict[str, tuple[Callable[[Any], bool], str]] = {
    "samples": (lambda v: isinstance(v, list) and all(_is_number(x) for x in v),
                "a list of finite numbers"),
    "note": (lambda v: isinstance(v, str), "a string"),
    "reference": (lambda v: isinstance(v, bool), "true or false"),
    "baseline": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "hung_rounds": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                    "an integer >= 0"),
    "round_budget_ms": (_is_number, "a finite number"),
}


# The statuses of a record that was not measured (see "Records").
STATUSES = ("hung", "skipped")

# What a status record needs instead of median, min, max and reps.
_STATUS_FIELDS = ("status", "reason")


def is_measured(rec: dict) -> bool:
    """False for a record with a status (hung or skipped)."""
    return "status" not in rec


def is_rounds_record(rec: dict) -> bool:
    """A hang-freedom record: rounds finished of rounds attempted."""
    return "hung_rounds" in rec


def validate_record(obj: Any) -> str | None:
    """Return why `obj` is not a valid record, or None if it is one."""
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    if "status" in obj:
        return _validate_status_record(obj)
    missing = [name for name in _REQUIRED if name not in obj]
    if missing:
        return "missing field(s): " + ", ".join(missing)
    for table in (_REQUIRED, _OPTIONAL):
        for name, (check, expected) in table.items():
            if name in obj and not check(obj[name]):
                return f"field {name!r} must be {expected}, got {obj[name]!r}"
    if not obj["min"] <= obj["median"] <= obj["max"]:
        return (f"expected min <= median <= max, got {obj['min']!r}, "
                f"{obj['median']!r}, {obj['max']!r}")
    return None


def _validate_status_record(obj: dict) -> str | None:
    """validate_record for a record with a status: the identifying fields and
    status and reason; no median, min, max or reps."""
    required = [n for n in _REQUIRED if n not in ("median", "min", "max", "reps")]
    missing = [n for n in required + list(_STATUS_FIELDS) if n not in obj]
    if missing:
        return "missing field(s): " + ", ".join(missing)
    if obj["status"] not in STATUSES:
        return f"field 'status' must be one of {', '.join(STATUSES)}, got {obj['status']!r}"
    if not isinstance(obj["reason"], str):
        return f"field 'reason' must be a string, got {obj['reason']!r}"
    for name in required:
        check, expected = _REQUIRED[name]
        if not check(obj[name]):
            return f"field {name!r} must be {expected}, got {obj[name]!r}"
    for name, (check, expected) in _OPTIONAL.items():
        if name in obj and not check(obj[name]):
            return f"field {name!r} must be {expected}, got {obj[name]!r}"
    present = [n for n in ("median", "min", "max", "reps") if n in obj]
    if present:
        return f"a record with a status has no {', '.join(present)}"
    return None


def _reject_constant(name: str) -> Any:
    """json parse_constant hook: NaN and Infinity are not valid records."""
    raise ValueError(f"non-finite number {name}")


def load_jsonl(path: Path, cut_short: bool = False) -> tuple[list[dict], list[str]]:
    """Read one record per line; return (records, "file:line: why" errors).

    Blank lines are skipped.  A malformed line is reported and left out; the
    other lines are still read.  With `cut_short` (the program was killed or
    failed), a last line that has no newline and is not valid JSON is the
    record it was writing when it ended: left out with a warning, not an
    error (the harness ends every record with a newline).
    """
    records: list[dict] = []
    errors: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line, parse_constant=_reject_constant)
            except ValueError as e:
                if cut_short and not line.endswith("\n"):
                    warn(f"{path}:{lineno}: the last record was cut short when the program "
                         "ended; left out")
                    continue
                errors.append(f"{path}:{lineno}: not valid JSON: {e}")
                continue
            why = validate_record(obj)
            if why:
                errors.append(f"{path}:{lineno}: {why}")
            else:
                records.append(obj)
    return records, errors


def load_results_json(path: Path) -> tuple[list[dict], list[str]]:
    """Read a results.json array; return (records, "file: record i: why")."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f, parse_constant=_reject_constant)
    if not isinstance(data, list):
        return [], [f"{path}: expected a JSON array of records"]
    records: list[dict] = []
    errors: list[str] = []
    for index, obj in enumerate(data):
        why = validate_record(obj)
        if why:
            errors.append(f"{path}: record {index}: {why}")
        else:
            records.append(obj)
    return records, errors
