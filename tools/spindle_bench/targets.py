"""The goals the project sets for its benchmarks (targets.toml, beside this
file), and their check against a run's records."""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Sequence

from .grouping import group_records
from .records import is_measured

# The data file: one [[target]] table per goal (its header says what each
# key means).
TARGETS_FILE = Path(__file__).resolve().parent / "targets.toml"

# The comparisons a target's `op` may make (value op bound) ...
TARGET_OPS = (">=", ">", "<=")
# ... and those of a `where` condition.
_CONDITION_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<=": operator.le, "<": operator.lt,
    ">=": operator.ge, ">": operator.gt,
}
_CONDITION = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|<=|<|>=|>)\s*"
                        r"([A-Za-z_][A-Za-z0-9_]*|-?[0-9]+(?:\.[0-9]+)?)\s*")


@functools.lru_cache(maxsize=None)
def parse_condition(text: str) -> Callable[[dict], bool]:
    """'threads <= permits' or 'disks == 20': a test of a comparison
    point's params, in which a param the point lacks counts as 0. Raises
    ValueError on anything else."""
    m = _CONDITION.fullmatch(text)
    if m is None:
        raise ValueError(f"condition {text!r} is not '<param> <op> <number or param>' "
                         f"(op one of {' '.join(_CONDITION_OPS)})")
    left, op, right = m.group(1), _CONDITION_OPS[m.group(2)], m.group(3)
    if right[0].isalpha() or right[0] == "_":
        return lambda p: op(p.get(left, 0), p.get(right, 0))
    number = float(right) if "." in right else int(right)
    return lambda p: op(p.get(left, 0), number)


@dataclasses.dataclass(frozen=True)
class Target:
    """A goal the project states for a benchmark, checked against a run.

    The measured value is the median of `variant`, or, with `over`, the
    median of `variant` divided by the median of `over` in the same
    comparison group (the same interleaved rounds). `where` (a condition,
    see parse_condition) picks the comparison points (params) the goal is
    about; every such point gets a row, or, with `worst`, only the point
    furthest from the goal."""

    issue: int
    goal: str
    suite: str
    workload: str
    metric: str
    variant: str
    over: str | None
    op: str  # ">=", ">" or "<="
    bound: float
    where: str | None = None
    worst: bool = False

    def applies(self, params: dict) -> bool:
        """Whether the goal is about the comparison point `params`."""
        return self.where is None or parse_condition(self.where)(params)


def _is_text(v: Any) -> bool:
    return isinstance(v, str) and v != ""


# The keys of a [[target]] table: (required, the check its value must pass,
# what to say if not).
_KEYS: dict[str, tuple[bool, Callable[[Any], bool], str]] = {
    "issue": (True, lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              "an integer >= 1"),
    "goal": (True, _is_text, "a non-empty string"),
    "suite": (True, _is_text, "a non-empty string"),
    "workload": (True, _is_text, "a non-empty string"),
    "metric": (True, _is_text, "a non-empty string"),
    "variant": (True, _is_text, "a non-empty string"),
    "over": (False, _is_text, "a non-empty string"),
    "op": (True, lambda v: v in TARGET_OPS, "one of " + ", ".join(TARGET_OPS)),
    "bound": (True, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
              and math.isfinite(v), "a finite number"),
    "where": (False, _is_text, "a condition"),
    "worst": (False, lambda v: isinstance(v, bool), "true or false"),
}


def _target(entry: Any) -> Target:
    """One [[target]] table as a Target; ValueError says what is wrong."""
    if not isinstance(entry, dict):
        raise ValueError("not a table")
    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)}")
    for key, (required, check, what) in _KEYS.items():
        if key not in entry:
            if required:
                raise ValueError(f"missing {key!r}")
            continue
        if not check(entry[key]):
            raise ValueError(f"{key!r} must be {what}, not {entry[key]!r}")
    if "where" in entry:
        parse_condition(entry["where"])
    # The bound is a float whatever the file wrote (the report prints a
    # float bound as "2048.0").
    return Target(entry["issue"], entry["goal"], entry["suite"], entry["workload"],
                  entry["metric"], entry["variant"], entry.get("over"), entry["op"],
                  float(entry["bound"]), entry.get("where"), entry.get("worst", False))


def load_targets(path: Path = TARGETS_FILE) -> tuple[Target, ...]:
    """The targets of a data file, in its order. Raises ValueError naming
    the file (and the entry) on a file that is not valid TOML or an entry
    that is not a valid target, OSError when it cannot be read."""
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: {e}") from None
    extra = sorted(set(data) - {"target"})
    if extra:
        raise ValueError(f"{path}: unknown key(s) {', '.join(extra)} (only [[target]] tables)")
    entries = data.get("target", [])
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: no [[target]] tables")
    targets = []
    for k, entry in enumerate(entries, start=1):
        try:
            targets.append(_target(entry))
        except ValueError as e:
            goal = entry.get("goal") if isinstance(entry, dict) else None
            raise ValueError(f"{path}: target {k}" + (f" ({goal!r})" if goal else "")
                             + f": {e}") from None
    return tuple(targets)


# The targets of the issues, read once when the tool starts (a broken file
# stops it before any suite runs).
TARGETS: tuple[Target, ...] = load_targets()


@dataclasses.dataclass
class TargetResult:
    target: Target
    params: dict | None  # None: no point of the goal was measured
    value: float | None
    points: int = 1  # how many points a `worst` result was picked from
    blocked: str | None = None  # "X hung": why a point has no value

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        t = self.target
        if t.op == ">=":
            return self.value >= t.bound
        if t.op == ">":
            return self.value > t.bound
        return self.value <= t.bound


def check_targets(records: Sequence[dict],
                  targets: Sequence[Target] = TARGETS) -> list[TargetResult]:
    """One result per measured point of each target whose suite has records
    in this run; a target of such a suite with no point gets one result with
    params None ("not measured")."""
    suites = {r["suite"] for r in records}
    groups = group_records(records)
    out: list[TargetResult] = []
    for t in targets:
        if t.suite not in suites:
            continue
        found: list[TargetResult] = []
        for g in groups:
            if (g.suite, g.workload, g.metric) != (t.suite, t.workload, t.metric):
                continue
            if not t.applies(g.params):
                continue
            by_variant = {r["variant"]: r for r in g.records}
            row = by_variant.get(t.variant)
            if row is None:
                continue
            den = by_variant.get(t.over) if t.over is not None else None
            if t.over is not None and den is None:
                continue
            unmeasured = [r for r in (row, den) if r is not None and not is_measured(r)]
            if unmeasured:
                found.append(TargetResult(t, g.params, None, blocked=", ".join(
                    f"{r['variant']} {r['status']}" for r in unmeasured)))
                continue
            value: float | None = row["median"]
            if den is not None:
                value = None if den["median"] == 0 else row["median"] / den["median"]
            found.append(TargetResult(t, g.params, value))
        if not found:
            out.append(TargetResult(t, None, None))
        elif t.worst:
            # A measured point that misses outranks one not measured (which
            # outranks those that meet it): a point that hung must not hide
            # a measured MISS.
            def badness(r: TargetResult) -> tuple[int, float]:
                if r.value is None:
                    return (1, 0.0)
                return (2 if r.met is False else 0, r.value if t.op == "<=" else -r.value)
            w = max(found, key=badness)
            out.append(TargetResult(t, w.params, w.value, len(found), w.blocked))
        else:
            out += found
    return out
