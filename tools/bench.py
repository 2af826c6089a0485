#!/usr/bin/env python3
"""Run spindle's benchmark programs and turn their records into a report.

Usage (from the repository root)::

    /usr/bin/python3 tools/bench.py --build-dir build/release \\
        --out bench/results/latest [--suite switch[,ces,...]] [--full] \\
        [--suite-budget SECONDS | --no-budget] \\
        [--compare OLD/results.json] [--report-only]

What it does
------------
1. Runs each suite program ``<build-dir>/bench/spindle_bench_<suite>`` as
   ``<prog> --out <tmp>/<suite>.jsonl --quick --time-budget S`` (``--full``
   with --full). The default suites are those of ``switch, ces, cqs, locks``
   whose program exists; a suite named with --suite whose program is missing
   is an error. The programs' stderr (their progress lines) and stdout go
   straight to the terminal.  Each program writes one JSON record per line
   (see "Records"). A program that exits non-zero (or writes no --out file)
   fails the run, but the records it did write are kept and its report
   section is marked as possibly incomplete; the suites after it still run.

   Hangs and budgets. Where a hang is handled, and why: inside a program,
   the harness (bench/harness/harness.hpp) watches every measurement; a
   variant that overruns its budget is recorded as "hung" and the program
   restarts itself to go on without it, so that the other variants of the
   same comparison are still measured interleaved in one process, as every
   comparison here is. Only the harness knows which variant of which
   comparison is running, and only it can replay the finished comparisons
   without measuring them again. This tool bounds the whole run: each suite
   has a time budget (SUITE_BUDGET_S in quick mode, FULL_SUITE_BUDGET_S with
   --full, or --suite-budget). The program gets SOFT_BUDGET_FRACTION of it as
   --time-budget (past it, the harness records what is left as "skipped"
   instead of running it) and the whole as --hard-budget (the harness
   watches no measurement past it, less a margin for its restart); at the
   budget itself the program's process group is killed (a hang outside a
   measurement, which the harness does not watch: SIGTERM, SIGKILL
   KILL_GRACE_S later, and a program still there REAP_WAIT_S after that is
   left behind), its records so far are kept, the suite is marked "timed
   out" and the next suite runs. Whatever is left of the group when the
   program ends is killed too. SIGTERM or SIGHUP to this tool kills the
   running program's group the same way and exits with no report.
2. Writes ``<out>/results.json`` (every record, a JSON array) and
   ``<out>/machine.json`` (CPU, kernel, date, git commit, the build's
   ``build_info.json`` under "build", and under "run" the command line and
   how each suite ended).
3. Writes ``<out>/report.md``: machine header (with how each suite ended
   and its budget), the targets the project's issues set (TARGETS below:
   each measured point, met or MISSED; also summed up on stdout), a
   "Hangs" section (the hang-freedom rounds, what hung, what was skipped),
   then per suite, per workload,
   one table per comparison group (records sharing suite, workload, params and
   metric), or one wide table when the workload is a sweep over one numeric
   parameter; ratios against the group's reference variant.
4. Writes ``<out>/<suite>_<workload>.png`` plots (matplotlib, Agg backend;
   ``<suite>_<workload>_<metric>.png`` when a workload reports several
   metrics), linked from report.md; none is started PLOT_BUDGET_S after the
   first.  Old PNGs in <out> are not deleted.
5. ``--compare OLD/results.json`` adds a section with each record's median
   change against an older run.
6. ``--report-only`` runs nothing and rebuilds report.md and the plots from
   ``<out>/results.json`` (and ``<out>/machine.json`` if present).

Exit status: 0 on success; 1 when a suite program failed or a record was
malformed (the report is still written from what was gathered); 2 on a usage
error (missing program, missing results.json, ...); 128 + N when stopped by
signal N (SIGINT, SIGTERM, SIGHUP).

Records
-------
One per measured point, as in docs/benchmarks.md "Result records"::

    {"suite": "switch", "workload": "yield", "variant": "spindle",
     "params": {"fibers": 10, "workers": 1},
     "metric": "ns_per_op", "higher_is_better": false,
     "median": 2.1, "min": 2.0, "max": 2.4, "reps": 5}

Optional fields: ``samples`` (list of numbers), ``note`` (string, printed
under the record's table), ``reference`` (bool, marks the group's reference),
``baseline`` (string: the variant of the same group this row's ratio is
computed against instead of the reference, e.g. a thread-only competitor
against spindle's thread variant), and on a hang-freedom record (metric
``rounds_finished``: rounds that finished, ``reps``: rounds attempted)
``hung_rounds`` and ``round_budget_ms``.

A variant that was not measured has a ``status`` instead of median, min, max
and reps: ``"hung"`` (the harness's watchdog stopped it) or ``"skipped"`` (the
suite's time budget was spent), and a ``reason``::

    {"suite": "cqs", "workload": "semaphore", "variant": "std_counting_semaphore",
     "params": {...}, "metric": "ops_per_s", "higher_is_better": true,
     "status": "hung", "reason": "no result within 10 s (...)"}

A workload skipped whole has one such record with variant and metric ``*``.
Such rows print their status instead of numbers, have no ratio, are never a
reference or a baseline, and are listed in the report's "Hangs and skips"
section.

Report rules
------------
* Comparison group: same suite, workload, params (compared as canonical JSON)
  and metric.  Records with different metrics are never compared.
* Reference of a group: among its measured records (those without a
  status), the one with ``"reference": true`` if any, else the first variant
  whose name starts with ``spindle``, else the first record.
* ratio = how many times better the reference is than the row:
  row/ref for lower-is-better metrics, ref/row for higher-is-better ones.
  So ``3.00×`` means the reference is three times better than that row.
  A row with a ``baseline`` is compared with that variant's record of the
  same group instead (``3.00× (vs spindle_thread)``; in a sweep table the
  column is headed ``spindle_thread vs <row>``); if the group has no record
  of that variant, the reference is used and the table says so.
* Sweep: when a workload's groups (of one metric) differ in exactly one
  numeric parameter and there are at least MIN_SWEEP_POINTS of them, the
  report prints one wide table (rows = parameter values, columns = variants'
  medians, then ratio columns) and a line plot.  When several parameters vary
  and at least one is numeric, the numeric one with the most values becomes
  the x axis and the report prints one such table and plot panel per
  combination of the others (e.g. threads sweep per ``permits`` value),
  provided each panel has MIN_SWEEP_POINTS points.  Otherwise: one table per
  group and a bar chart with one panel per group.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

# Suites in the order they run by default; a suite is included by default only
# when its program exists in the build directory.
KNOWN_SUITES = ("switch", "ces", "cqs", "locks")
PROGRAM_PREFIX = "spindle_bench_"

# Time budget of each suite of the quick run, in seconds (see "Hangs and
# budgets" above). Quick runs on the project's 2-CPU machine took switch
# 5-9 s, ces 41-180 s (180 at a load average near 200), cqs 49-52 s (75 s
# with hang_freedom, under that load) and locks 113-135 s: each budget is
# well above the slowest, so that a slow, shared machine still finishes,
# and a hang costs at most the budget. Their sum, 13 minutes, bounds a
# quick run (README, "make bench").
SUITE_BUDGET_S = {"switch": 60, "ces": 300, "cqs": 180, "locks": 240}
DEFAULT_SUITE_BUDGET_S = 120  # a quick suite not in the table
FULL_SUITE_BUDGET_S = 4 * 3600  # each suite of --full: a bound, not an estimate
# The program's own --time-budget: this share of the budget, so that it
# records what it skips before it is killed.
SOFT_BUDGET_FRACTION = 0.85
# After the budget: SIGTERM to the program's process group, and SIGKILL this
# much later if it is still there; a program that has not ended this much
# after the SIGKILL (stuck in the kernel) is left behind.
KILL_GRACE_S = 5
REAP_WAIT_S = 5
# The plots: none is started past this many seconds after the first (the
# report then links only those drawn), so that drawing them cannot hold
# the run up for long on a slow machine.
PLOT_BUDGET_S = 40

# A workload is shown as a sweep (wide table + line plot) only when each panel
# has at least this many values of the swept parameter; below that, per-group
# tables read just as well.
MIN_SWEEP_POINTS = 3

# An axis is drawn logarithmic when its values span more than this factor.
LOG_SCALE_SPAN = 100.0

# In --compare, a median change smaller than this (in percent) is called "≈".
COMPARE_NOISE_PCT = 2.0

# In --compare, at most this many unmatched records are listed one by one.
COMPARE_MAX_LISTED = 20

# Units of the metrics we know; other names of the form "<a>_per_<b>" print as
# "a/b", anything else prints as the metric name.
METRIC_UNITS = {
    "ns_per_op": "ns/op",
    "ops_per_s": "ops/s",
    "bytes": "bytes",
    "ns": "ns",
    "us": "µs",
    "ms": "ms",
    "s": "s",
    "cycles": "cycles",
    "percent": "%",
    "pct": "%",
}

EXIT_OK = 0
EXIT_FAILED = 1  # a suite failed or a record was malformed; report written
EXIT_USAGE = 2  # nothing could be run or read


def warn(message: str) -> None:
    """Print a diagnostic on stderr, prefixed with the tool's name."""
    print(f"bench.py: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Records: validation and loading
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Grouping, references and ratios
# ---------------------------------------------------------------------------


def canonical_params(params: dict) -> str:
    """Params as canonical JSON, so that equal dicts compare equal."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def select_reference(records: Sequence[dict]) -> dict:
    """The record the others are compared to (see the module docstring); a
    record that was not measured only when no record was."""
    measured = [r for r in records if is_measured(r)] or list(records)
    for rec in measured:
        if rec.get("reference") is True:
            return rec
    for rec in measured:
        if rec["variant"].startswith("spindle"):
            return rec
    return measured[0]


def select_baseline(row: dict, records: Sequence[dict], ref: dict) -> dict:
    """The record `row` is compared to: the record of its ``baseline``
    variant among `records` (one comparison group), else `ref`."""
    name = row.get("baseline")
    if name and name != row["variant"]:
        for rec in records:
            if rec["variant"] == name and is_measured(rec):
                return rec
    return ref


def ratio_to_reference(row: dict, ref: dict, higher_is_better: bool) -> float | None:
    """How many times better `ref` is than `row`; None if undefined (0, or
    either was not measured)."""
    if not (is_measured(row) and is_measured(ref)):
        return None
    num, den = ((ref["median"], row["median"]) if higher_is_better
                else (row["median"], ref["median"]))
    if den == 0:
        return None
    return num / den


@dataclasses.dataclass
class Group:
    """Records that compare with one another: same suite, workload, params and
    metric, in the order the harness wrote them."""

    suite: str
    workload: str
    metric: str
    params: dict
    records: list[dict]

    @property
    def reference(self) -> dict:
        return select_reference(self.records)

    @property
    def higher_is_better(self) -> bool:
        # Taken from the reference; warnings() flags a group that disagrees.
        return self.reference["higher_is_better"]

    def warnings(self) -> list[str]:
        """Inconsistencies worth printing under the group's table."""
        out = []
        if len({r["higher_is_better"] for r in self.records}) > 1:
            out.append("records disagree on higher_is_better; the reference's "
                       "direction is used")
        if sum(1 for r in self.records if r.get("reference") is True) > 1:
            out.append("several records are marked reference; the first is used")
        variants = [r["variant"] for r in self.records]
        dups = sorted({v for v in variants if variants.count(v) > 1})
        if dups:
            out.append("variant(s) measured more than once: " + ", ".join(dups))
        measured = [r["variant"] for r in self.records if is_measured(r)]
        for r in self.records:
            name = r.get("baseline")
            if not name or name == r["variant"] or not is_measured(r):
                continue
            if name not in variants:
                out.append(f"{r['variant']}: baseline {name} is not in this "
                           "comparison; its ratio is against the reference")
            elif name not in measured:
                out.append(f"{r['variant']}: baseline {name} was not measured; "
                           "its ratio is against the reference")
        return out


def group_records(records: Iterable[dict]) -> list[Group]:
    """Split records into comparison groups, in order of first appearance."""
    groups: dict[tuple, Group] = {}
    for rec in records:
        key = (rec["suite"], rec["workload"], canonical_params(rec["params"]),
               rec["metric"])
        if key not in groups:
            groups[key] = Group(rec["suite"], rec["workload"], rec["metric"],
                                rec["params"], [])
        groups[key].records.append(rec)
    return list(groups.values())


@dataclasses.dataclass
class WorkloadView:
    """All groups of one (suite, workload, metric): one report subsection and
    one plot."""

    suite: str
    workload: str
    metric: str
    groups: list[Group]

    @property
    def higher_is_better(self) -> bool:
        return self.groups[0].higher_is_better


def workload_views(groups: Iterable[Group]) -> list[WorkloadView]:
    """Gather groups by (suite, workload, metric), in order of appearance."""
    views: dict[tuple, WorkloadView] = {}
    for g in groups:
        key = (g.suite, g.workload, g.metric)
        if key not in views:
            views[key] = WorkloadView(g.suite, g.workload, g.metric, [])
        views[key].groups.append(g)
    return list(views.values())


@dataclasses.dataclass
class Facet:
    """One panel of a sweep: the fixed values of the other varying params and
    the groups along the swept axis, sorted by it."""

    fixed: dict
    groups: list[Group]

    @property
    def records(self) -> list[dict]:
        return [r for g in self.groups for r in g.records]

    @property
    def reference_variant(self) -> str:
        """The reference variant of the whole panel, same rules as a group."""
        return select_reference(self.records)["variant"]

    @property
    def variants(self) -> list[str]:
        """Every variant in the panel, in order of first appearance."""
        return list(dict.fromkeys(r["variant"] for r in self.records))


@dataclasses.dataclass
class Sweep:
    axis: str
    facets: list[Facet]


def _is_param_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def find_sweep(groups: Sequence[Group]) -> Sweep | None:
    """Detect a sweep over one numeric parameter (see the module docstring).

    All groups must have the same parameter names.  With one varying
    parameter it must be numeric; with several, the numeric one with the most
    distinct values is the axis (first in params order on a tie) and the
    others split the groups into facets.  Each facet needs MIN_SWEEP_POINTS
    points.
    """
    if len(groups) < MIN_SWEEP_POINTS:
        return None
    keys = list(groups[0].params)
    if any(set(g.params) != set(keys) for g in groups):
        return None
    values = {k: {json.dumps(g.params[k], sort_keys=True) for g in groups}
              for k in keys}
    varying = [k for k in keys if len(values[k]) > 1]
    numeric = [k for k in varying
               if all(_is_param_number(g.params[k]) for g in groups)]
    if not numeric:
        return None
    axis = max(numeric, key=lambda k: len(values[k]))  # first wins a tie
    others = [k for k in varying if k != axis]

    facets: dict[str, Facet] = {}
    for g in groups:
        fixed = {k: g.params[k] for k in others}
        facets.setdefault(canonical_params(fixed), Facet(fixed, [])).groups.append(g)
    for facet in facets.values():
        if len(facet.groups) < MIN_SWEEP_POINTS:
            return None
        facet.groups.sort(key=lambda g: g.params[axis])
    return Sweep(axis, list(facets.values()))


# ---------------------------------------------------------------------------
# Formatting helpers
# ---------------------------------------------------------------------------


def metric_unit(metric: str) -> str:
    """'ns_per_op' -> 'ns/op'; unknown metrics print as their name."""
    if metric in METRIC_UNITS:
        return METRIC_UNITS[metric]
    m = re.fullmatch(r"([A-Za-z0-9]+)_per_([A-Za-z0-9]+)", metric)
    if m:
        return f"{m.group(1)}/{m.group(2)}"
    return metric


def direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"


def describe_metric(metric: str, higher_is_better: bool) -> str:
    """'ns_per_op (ns/op, lower is better)'; the unit only when it says more
    than the name."""
    unit = metric_unit(metric)
    what = f"{unit}, " if unit != metric else ""
    return f"{metric} ({what}{direction(higher_is_better)})"


def fmt_num(x: float | int) -> str:
    """A measurement, to about three significant digits, with thousands
    separators for large values."""
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    a = abs(x)
    if a == 0:
        return "0"
    if a >= 1e4:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    if a >= 0.01:
        return f"{x:.3f}"
    return f"{x:.3g}"


def fmt_ratio(ratio: float | None, is_reference: bool = False) -> str:
    """'2.31×'; '1.00× (ref)' on the reference row; '—' when undefined."""
    if is_reference:
        return "1.00× (ref)"
    if ratio is None:
        return "—"
    if ratio >= 100:
        return f"{ratio:.0f}×"
    if ratio >= 10:
        return f"{ratio:.1f}×"
    return f"{ratio:.2f}×"


def fmt_param_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def fmt_params(params: dict) -> str:
    """'fibers=10, workers=1', or '(no params)'."""
    if not params:
        return "(no params)"
    return ", ".join(f"{k}={fmt_param_value(v)}" for k, v in params.items())


def md_escape(text: str) -> str:
    """Make free text safe inside a Markdown table cell or list item."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[str]],
             right: Sequence[bool]) -> list[str]:
    """A GitHub Markdown table; `right[i]` right-aligns column i."""
    lines = ["| " + " | ".join(md_escape(h) for h in headers) + " |",
             "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(md_escape(c) for c in row) + " |")
    return lines


def plot_file_name(view: WorkloadView, metrics_in_workload: int) -> str:
    """'<suite>_<workload>.png', plus '_<metric>' when the workload has
    several metrics; characters unsafe in file names become '_'."""
    parts = [view.suite, view.workload]
    if metrics_in_workload > 1:
        parts.append(view.metric)
    return re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(parts)) + ".png"


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def render_group_table(group: Group) -> list[str]:
    """One comparison group: heading line, table, notes."""
    ref = group.reference
    hib = group.higher_is_better
    lines = [f"**{md_escape(fmt_params(group.params))}** — "
             f"{describe_metric(group.metric, hib)}", ""]
    rows = []
    for rec in group.records:
        if not is_measured(rec):
            rows.append([rec["variant"], rec["status"], "—", "—", "—", "—"])
            continue
        is_ref = rec is ref
        base = select_baseline(rec, group.records, ref)
        ratio = fmt_ratio(ratio_to_reference(rec, base, hib), is_ref)
        if not is_ref and base is not ref:
            ratio += f" (vs {base['variant']})"
        rows.append([rec["variant"], fmt_num(rec["median"]), fmt_num(rec["min"]),
                     fmt_num(rec["max"]), str(rec["reps"]), ratio])
    lines += md_table(["variant", "median", "min", "max", "reps", "ratio"], rows,
                      [False, True, True, True, True, True])
    notes = [f"- {md_escape(r['variant'])}: {md_escape(r['note'])}"
             for r in group.records if r.get("note")]
    notes += [f"- ⚠ {md_escape(r['variant'])} {r['status']}: {md_escape(r['reason'])}"
              for r in group.records if not is_measured(r)]
    notes += [f"- ⚠ {w}" for w in group.warnings()]
    if notes:
        lines += [""] + notes
    return lines + [""]


def render_sweep_table(view: WorkloadView, sweep: Sweep, facet: Facet) -> list[str]:
    """One wide table: rows = values of the swept param, columns = variants'
    medians, then one ratio column per non-reference variant."""
    ref_variant = facet.reference_variant
    variants = facet.variants
    others = [v for v in variants if v != ref_variant]
    hib = view.higher_is_better
    # Each other variant is compared with its baseline (the first one its
    # records name, if that variant is in the panel) or the reference.
    base_of: dict[str, str] = {}
    for v in others:
        named = next((r["baseline"] for r in facet.records
                      if r["variant"] == v and r.get("baseline")), None)
        base_of[v] = named if named in variants and named != v else ref_variant
    lines = []
    if facet.fixed:
        lines += [f"**{md_escape(fmt_params(facet.fixed))}**", ""]
    headers = ([sweep.axis] + variants
               + [f"{base_of[v]} vs {v}" for v in others])
    rows = []
    for g in facet.groups:
        by_variant: dict[str, dict] = {}
        for rec in g.records:
            by_variant.setdefault(rec["variant"], rec)
        row = [fmt_param_value(g.params[sweep.axis])]
        row += [_fmt_cell(by_variant[v]) if v in by_variant else "—"
                for v in variants]
        for v in others:
            base = by_variant.get(base_of[v])
            if base is None or v not in by_variant:
                row.append("—")
            else:
                row.append(fmt_ratio(ratio_to_reference(by_variant[v], base, hib)))
        rows.append(row)
    lines += md_table(headers, rows, [True] * len(headers))

    # Notes: print each (variant, note) once; name the axis values it applies
    # to unless it applies to every row.
    notes: dict[tuple[str, str], list[str]] = {}
    for g in facet.groups:
        for rec in g.records:
            texts = [rec["note"]] if rec.get("note") else []
            if not is_measured(rec):
                texts.append(f"⚠ {rec['status']}: {rec['reason']}")
            for text in texts:
                notes.setdefault((rec["variant"], text), []).append(
                    fmt_param_value(g.params[sweep.axis]))
    extra = []
    for (variant, note), where in notes.items():
        scope = ("" if len(where) == len(facet.groups)
                 else f" ({sweep.axis}={', '.join(where)})")
        extra.append(f"- {md_escape(variant)}{scope}: {md_escape(note)}")
    for g in facet.groups:
        extra += [f"- ⚠ {sweep.axis}={fmt_param_value(g.params[sweep.axis])}: {w}"
                  for w in g.warnings()]
    if extra:
        lines += [""] + extra
    return lines + [""]


def _fmt_count(x: float | int) -> str:
    """A count of rounds: a whole number with thousands separators."""
    return f"{round(x):,}" if float(x).is_integer() else fmt_num(x)


def _fmt_cell(rec: dict) -> str:
    """A record's median, or its status when it was not measured."""
    return fmt_num(rec["median"]) if is_measured(rec) else rec["status"]


def is_workload_skip(rec: dict) -> bool:
    """The one record of a workload skipped whole."""
    return rec["variant"] == "*" and not is_measured(rec)


def render_rounds_table(group: Group) -> list[str]:
    """A hang-freedom group: rounds attempted, finished and hung per
    variant, and why rounds hung (in the notes)."""
    lines = [f"**{md_escape(fmt_params(group.params))}** — repeated contended "
             "rounds, each with a time budget: how many finished, how many hung",
             ""]
    rows = []
    for rec in group.records:
        if not is_measured(rec):
            rows.append([rec["variant"], "—", rec["status"], "—", "—"])
            continue
        budget = rec.get("round_budget_ms")
        rows.append([rec["variant"], _fmt_count(rec["reps"]), _fmt_count(rec["median"]),
                     _fmt_count(rec.get("hung_rounds", 0)),
                     "—" if budget is None else f"{fmt_num(budget)} ms"])
    lines += md_table(["variant", "rounds", "finished", "hung", "round budget"], rows,
                      [False, True, True, True, True])
    notes = [f"- {md_escape(r['variant'])}: {md_escape(r['note'])}"
             for r in group.records if r.get("note")]
    notes += [f"- ⚠ {md_escape(r['variant'])} {r['status']}: {md_escape(r['reason'])}"
              for r in group.records if not is_measured(r)]
    if notes:
        lines += [""] + notes
    return lines + [""]


def render_view(view: WorkloadView, plot: str | None) -> list[str]:
    """The body of one workload subsection (for one metric)."""
    lines: list[str] = []
    records = [r for g in view.groups for r in g.records]
    if all(is_workload_skip(r) for r in records):
        return [f"*Not run: {md_escape(records[0]['reason'])}*", ""]
    if any(is_rounds_record(r) for r in records):
        for group in view.groups:
            lines += render_rounds_table(group)
        return lines
    sweep = find_sweep(view.groups)
    if sweep:
        ref_names = sorted({f.reference_variant for f in sweep.facets})
        lines += [f"Sweep over **{sweep.axis}** — medians of "
                  f"{describe_metric(view.metric, view.higher_is_better)}; "
                  "the ratio columns say "
                  f"how many times better {' / '.join(ref_names)} is"
                  + (" (a column `A vs B`: how many times better A is than B)"
                     if any(r.get("baseline") for g in view.groups for r in g.records)
                     else "")
                  + "; min, max and reps are in results.json.", ""]
        for facet in sweep.facets:
            lines += render_sweep_table(view, sweep, facet)
    else:
        for group in view.groups:
            lines += render_group_table(group)
    if plot:
        lines += [f"![{view.suite} {view.workload}: {view.metric}]({plot})", ""]
    return lines


def suite_outcome(s: dict) -> str:
    """'ok', 'TIMED OUT (...)' or 'FAILED (...)' for a suite's status."""
    if s.get("timed_out"):
        after = (f"; workload {s['last_workload']} was cut short and what came after "
                 "it did not run" if s.get("last_workload") else "")
        return f"TIMED OUT (killed at its budget of {s.get('budget_s', 0):g} s{after})"
    if s.get("exit_code") == 0:
        return "ok"
    return f"FAILED ({s.get('error') or 'exit status %s' % s.get('exit_code')})"


def render_header(machine: dict, regenerated_by: str | None) -> list[str]:
    """Title, machine and build table, command line, suite outcomes."""
    build = machine.get("build") or {}
    if not isinstance(build, dict):  # build_info.json was not valid JSON
        build = {"flags": str(build)}
    run = machine.get("run") or {}
    info = [
        ("CPU", machine.get("cpu_model", "unknown")),
        ("logical CPUs", machine.get("logical_cpus", "unknown")),
        ("kernel", machine.get("kernel", "unknown")),
        ("date (UTC)", machine.get("date", "unknown")),
        ("git commit", machine.get("git_commit", "unknown")),
        ("compiler", build.get("compiler", "unknown")),
        ("build type", build.get("build_type", "unknown")),
        ("flags", " ".join(str(build.get("flags", "unknown")).split()) or "(none)"),
        ("sanitizer", build.get("sanitizer") or "none"),
        ("mode", run.get("mode", "unknown")),
    ]
    lines = ["# spindle benchmark report", ""]
    lines += md_table(["", ""], [[k, str(v)] for k, v in info], [False, False])
    lines += ["", "Command:", "", "```sh", run.get("command", "unknown"), "```", ""]
    if regenerated_by:
        lines += ["Report rebuilt from results.json by:", "", "```sh",
                  regenerated_by, "```", ""]
    suites = run.get("suites") or []
    if suites:
        rows = [[s["name"], suite_outcome(s), f"{s.get('elapsed_s', 0):.1f} s",
                 f"{s['budget_s']:g} s" if s.get("budget_s") else "—",
                 str(s.get("records", 0)), str(s.get("hung", 0)), str(s.get("skipped", 0))]
                for s in suites]
        lines += md_table(["suite", "status", "time", "budget", "records", "hung",
                           "skipped"], rows,
                          [False, False, True, True, True, True, True]) + [""]
        if run.get("budget_s"):
            lines += [f"The suites' budgets add up to {run['budget_s']:g} s; the suites "
                      f"took {run.get('elapsed_s', 0):.0f} s.", ""]
    lines += ["Each table compares records of one suite, workload, params and "
              "metric. **ratio** = how many times better the reference "
              "variant (marked `(ref)`) is than that row: row/ref when lower "
              "is better, ref/row when higher is better; above 1.00× the "
              "reference wins. A ratio marked `(vs X)`, or a sweep column "
              "`X vs Y`, compares with variant X instead (the row's "
              "baseline, e.g. a thread competitor against spindle's thread "
              "variant).", ""]
    return lines


def render_comparison(new: Sequence[dict], old: Sequence[dict],
                      old_path: str) -> list[str]:
    """Median change of each record against an older run, matched by
    (suite, workload, variant, params, metric)."""
    def key(r: dict) -> tuple:
        return (r["suite"], r["workload"], r["variant"],
                canonical_params(r["params"]), r["metric"])

    # What hung or was skipped has no median to compare (the "Hangs" section
    # lists it).
    new = [r for r in new if is_measured(r)]
    old = [r for r in old if is_measured(r)]
    old_by_key: dict[tuple, dict] = {}
    for r in old:
        old_by_key.setdefault(key(r), r)
    new_keys = {key(r) for r in new}
    rows = []
    better = worse = 0
    for r in new:
        o = old_by_key.get(key(r))
        if o is None:
            continue
        if o["median"] == 0:
            change, verdict = "—", "—"
        else:
            pct = (r["median"] - o["median"]) / abs(o["median"]) * 100.0
            improved = pct > 0 if r["higher_is_better"] else pct < 0
            if abs(pct) < COMPARE_NOISE_PCT:
                verdict = "≈"
            elif improved:
                verdict, better = "better", better + 1
            else:
                verdict, worse = "worse", worse + 1
            change = f"{pct:+.1f}%"
        rows.append([r["suite"], r["workload"], fmt_params(r["params"]),
                     r["variant"], metric_unit(r["metric"]), fmt_num(o["median"]),
                     fmt_num(r["median"]), change, verdict])
    only_new = [r for r in new if key(r) not in old_by_key]
    only_old = [r for r in old if key(r) not in new_keys]
    # Suites this run did not run at all are summarized, not listed.
    new_suites = {r["suite"] for r in new}
    not_run = sorted({r["suite"] for r in only_old} - new_suites)
    only_old_listed = [r for r in only_old if r["suite"] in new_suites]

    lines = ["## Comparison with an earlier run", "",
             f"Old results: `{old_path}`. {len(rows)} records matched: "
             f"{better} better, {worse} worse, {len(rows) - better - worse} "
             f"within ±{COMPARE_NOISE_PCT:g}% or undefined; {len(only_new)} "
             f"only in this run, {len(only_old)} only in the old one.", ""]
    if rows:
        lines += md_table(["suite", "workload", "params", "variant", "unit",
                           "old median", "new median", "change", ""], rows,
                          [False] * 5 + [True] * 3 + [False]) + [""]
    for title, recs in (("Only in this run", only_new),
                        ("Only in the old run", only_old_listed)):
        if recs:
            lines += [f"{title}:", ""]
            lines += [f"- {md_escape(r['suite'])} / {md_escape(r['workload'])} / "
                      f"{md_escape(r['variant'])} / {md_escape(fmt_params(r['params']))}"
                      f" / {md_escape(r['metric'])}" for r in recs[:COMPARE_MAX_LISTED]]
            if len(recs) > COMPARE_MAX_LISTED:
                lines.append(f"- … and {len(recs) - COMPARE_MAX_LISTED} more")
            lines.append("")
    if not_run:
        lines += [f"The old run also has suites this run did not run: "
                  f"{', '.join(not_run)}.", ""]
    return lines


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    """A goal the project states for a benchmark, checked against a run.

    The measured value is the median of `variant`, or, with `over`, the
    median of `variant` divided by the median of `over` in the same
    comparison group (the same interleaved rounds). `where` picks the
    comparison points (params) the goal is about; every such point gets a
    row, or, with `worst`, only the point furthest from the goal."""

    issue: int
    goal: str
    suite: str
    workload: str
    metric: str
    variant: str
    over: str | None
    op: str  # ">=", ">" or "<="
    bound: float
    where: Callable[[dict], bool] | None = None
    worst: bool = False


def _uncontended(p: dict) -> bool:
    return p.get("threads", 0) <= p.get("permits", 0)


def _contended(p: dict) -> bool:
    return p.get("threads", 0) > p.get("permits", 0)


# The targets of the issues, as the benchmarks measure them (see
# docs/benchmarks.md, "Targets", for the workloads).
TARGETS: tuple[Target, ...] = (
    Target(2, "yield ring: ns per yield (empty loop subtracted)", "switch", "yield",
           "ns_per_op", "spindle", None, "<=", 2.5),
    Target(2, "yield ring: Boost.Context fiber's time / spindle's", "switch", "yield",
           "ns_per_op", "boost_context", "spindle", ">=", 2.0),
    Target(2, "sum of sequence: spindle generator's time / C++20 stackless's", "switch", "sum",
           "ns_per_op", "spindle", "cxx20_stackless", "<=", 1.3),
    Target(2, "Hanoi(20): C++20 stackless generator's time / spindle's", "switch", "hanoi",
           "ns_per_op", "cxx20_stackless", "spindle", ">=", 3.0, lambda p: p.get("disks") == 20),
    Target(2, "Hanoi(20): Boost.Context's time / spindle's", "switch", "hanoi",
           "ns_per_op", "boost_context", "spindle", ">=", 1.5, lambda p: p.get("disks") == 20),
    Target(2, "write_fully: Boost.Context's time / spindle's", "switch", "write_fully",
           "ns_per_op", "boost_context", "spindle", ">", 1.0),
    Target(2, "write_fully: C++20 stackless's time / spindle's", "switch", "write_fully",
           "ns_per_op", "cxx20_stackless", "spindle", ">", 1.0),
    Target(2, "100 000 fibers with 16 KiB stacks: MiB of RSS", "switch", "memory",
           "rss_mib_total", "spindle", None, "<=", 2048.0),
    Target(4, "abort: suspend + cancel cost / its cost with no waiter queued (simple)", "cqs",
           "abort", "growth_from_empty", "spindle_simple", None, "<=", 1.5, worst=True),
    Target(4, "abort: suspend + cancel cost / its cost with no waiter queued (smart)", "cqs",
           "abort", "growth_from_empty", "spindle_smart", None, "<=", 1.5, worst=True),
    Target(4, "abort at 10 000 queued: linear-removal queue's cost / spindle's (simple)", "cqs",
           "abort", "speedup_vs_linear_removal", "spindle_simple", None, ">=", 50.0,
           lambda p: p.get("queued") == 10000),
    Target(4, "semaphore, threads <= permits: spindle (fibers) / std::counting_semaphore", "cqs",
           "semaphore", "ops_per_s", "spindle_fiber", "std_counting_semaphore", ">=", 1.0,
           _uncontended),
    Target(4, "semaphore, threads <= permits: spindle (threads) / std::counting_semaphore", "cqs",
           "semaphore", "ops_per_s", "spindle_thread", "std_counting_semaphore", ">=", 1.0,
           _uncontended),
    Target(4, "semaphore, threads > permits: spindle (fibers) / std::counting_semaphore (threads)",
           "cqs", "semaphore", "ops_per_s", "spindle_fiber", "std_counting_semaphore", ">=", 2.0,
           _contended),
    Target(4, "latch: std::latch's time / spindle's (fibers)", "cqs", "latch", "ns_per_round",
           "std_latch", "spindle_fiber", ">=", 1.0),
    Target(4, "latch: std::latch's time / spindle's (threads)", "cqs", "latch", "ns_per_round",
           "std_latch", "spindle_thread", ">=", 1.0),
    Target(4, "barrier: std::barrier's time / spindle's (fibers)", "cqs", "barrier",
           "ns_per_phase", "std_barrier", "spindle_fiber", ">=", 1.0),
    Target(4, "barrier: std::barrier's time / spindle's (threads)", "cqs", "barrier",
           "ns_per_phase", "std_barrier", "spindle_thread", ">=", 1.0),
)


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
            if t.where is not None and not t.where(g.params):
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


def render_targets(results: Sequence[TargetResult]) -> list[str]:
    """The report's "Targets" section (nothing when no target applies)."""
    if not results:
        return []
    rows = []
    for r in results:
        t = r.target
        if r.params is None:
            status, measured, point = "not measured", "-", "-"
        else:
            status = "met" if r.met else ("MISSED" if r.met is False else "undefined")
            if r.blocked:
                status = f"not measured ({r.blocked})"
            measured = "-" if r.value is None else fmt_num(r.value)
            point = fmt_params(r.params)
            if r.points > 1:
                point = f"worst of {r.points}: {point}"
        rows.append([f"#{t.issue}", t.goal, point, measured, f"{t.op} {fmt_num(t.bound)}", status])
    met = sum(1 for r in results if r.met)
    missed = sum(1 for r in results if r.met is False)
    lines = ["## Targets", "",
             f"The goals the project's issues set for these benchmarks, against this "
             f"run's medians (a ratio divides two medians of the same comparison, "
             f"measured in the same interleaved rounds): {met} met, {missed} missed.",
             ""]
    lines += md_table(["issue", "goal", "point", "measured", "target", ""], rows,
                      [False, False, False, True, False, False])
    return lines + [""]


def render_hangs(records: Sequence[dict]) -> list[str]:
    """The report's "Hangs" section: the hang-freedom rounds, every variant
    that hung, and what was skipped; nothing when there is none of these."""
    rounds = [r for r in records if is_rounds_record(r) and is_measured(r)]
    hung = [r for r in records if r.get("status") == "hung"]
    skipped = [r for r in records if r.get("status") == "skipped"]
    if not (rounds or hung or skipped):
        return []
    lines = ["## Hangs", ""]
    if rounds:
        lines += ["Hang freedom: contended rounds repeated, each with a time budget "
                  "(a round that makes no progress within it is hung and its "
                  "process killed; the reasons are under the suite's tables).", ""]
        rows = [[r["suite"], md_escape(fmt_params(r["params"])), r["variant"],
                 _fmt_count(r["reps"]), _fmt_count(r["median"]),
                 _fmt_count(r.get("hung_rounds", 0))]
                for r in rounds]
        lines += md_table(["suite", "rounds of", "variant", "rounds", "finished", "hung"],
                          rows, [False, False, False, True, True, True]) + [""]
    if hung:
        lines += ["Measurements that hung (the watchdog stopped them; the rest of "
                  "their comparison was measured without them):", ""]
        rows = [[r["suite"], r["workload"], md_escape(fmt_params(r["params"])),
                 r["variant"], md_escape(r["reason"])] for r in hung]
        lines += md_table(["suite", "workload", "params", "variant", "reason"], rows,
                          [False] * 5) + [""]
    else:
        lines += ["No measurement hung.", ""]
    if skipped:
        by_suite: dict[str, list[dict]] = {}
        for r in skipped:
            by_suite.setdefault(r["suite"], []).append(r)
        lines += ["Skipped (not run: a time budget was spent; each record's reason says "
                  "which):", ""]
        for suite, recs in by_suite.items():
            whole = sorted({r["workload"] for r in recs if is_workload_skip(r)})
            parts = {(r["workload"], canonical_params(r["params"])) for r in recs
                     if not is_workload_skip(r)}
            what = []
            if parts:
                what.append(f"{len(parts)} comparisons ({len(recs) - len(whole)} variant runs)")
            if whole:
                what.append("workloads " + ", ".join(whole))
            lines.append(f"- {suite}: {'; '.join(what)}")
        lines.append("")
    return lines


def render_report(records: Sequence[dict], machine: dict,
                  plots: dict[tuple, str] | None = None,
                  compare: tuple[Sequence[dict], str] | None = None,
                  regenerated_by: str | None = None) -> str:
    """The whole report.md.  `plots` maps (suite, workload, metric) to a PNG
    file name; `compare` is (old records, old path)."""
    plots = plots or {}
    lines = render_header(machine, regenerated_by)
    lines += render_targets(check_targets(records))
    lines += render_hangs(records)
    failed = {s["name"]: s for s in (machine.get("run") or {}).get("suites", [])
              if s.get("exit_code") != 0}
    views = workload_views(group_records(records))
    if not views:
        lines += ["*No records.*", ""]
    suite = workload = None
    for view in views:
        if view.suite != suite:
            suite, workload = view.suite, None
            lines += [f"## Suite `{suite}`", ""]
            if suite in failed and failed[suite].get("timed_out"):
                lines += ["⚠ The suite's program was killed at its time budget; "
                          "the results below are incomplete.", ""]
            elif suite in failed:
                lines += ["⚠ The suite's program failed; the results below may "
                          "be incomplete.", ""]
        if view.workload != workload:
            workload = view.workload
            lines += [f"### {workload}", ""]
        lines += render_view(view, plots.get((view.suite, view.workload, view.metric)))
    if compare is not None:
        lines += render_comparison(records, compare[0], compare[1])
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------


def _span_is_large(values: Sequence[float]) -> bool:
    """True when all values are positive and span more than LOG_SCALE_SPAN."""
    return (bool(values) and min(values) > 0
            and max(values) / min(values) > LOG_SCALE_SPAN)


def _subplot_grid(plt: Any, n: int, width: float, height: float,
                  max_cols: int = 3) -> tuple[Any, list]:
    """A figure with n panels, up to max_cols per row; unused panels hidden."""
    ncols = min(n, max_cols)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _plot_title(view: WorkloadView) -> str:
    return (f"{view.suite} / {view.workload}: "
            f"{describe_metric(view.metric, view.higher_is_better)}")


def _is_power_of_two_series(xs: Sequence[float]) -> bool:
    """1, 2, 4, 8, ... (thread and worker counts often double)."""
    return (len(xs) >= 3 and all(isinstance(x, int) and x > 0 and x & (x - 1) == 0
                                 for x in xs))


def _set_sweep_xscale(ax: Any, xs: Sequence[float]) -> None:
    """Log base 2 for doubling series, log for wide spans, symlog for wide
    spans that include 0; integer ticks for integer params."""
    from matplotlib.ticker import MaxNLocator, NullLocator, ScalarFormatter
    distinct = sorted(set(xs))
    if _is_power_of_two_series(distinct):
        ax.set_xscale("log", base=2)
        ax.set_xticks(distinct)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
    elif _span_is_large(distinct):
        ax.set_xscale("log")
    elif distinct and distinct[0] == 0 and distinct[-1] > LOG_SCALE_SPAN:
        linthresh = min(x for x in distinct if x > 0)
        ax.set_xscale("symlog", linthresh=linthresh)
        # Nothing is negative: start just left of 0 rather than at -max.
        ax.set_xlim(-0.3 * linthresh, distinct[-1] * 1.5)
    elif all(isinstance(x, int) for x in distinct):
        if len(distinct) <= 12:
            ax.set_xticks(distinct)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_sweep(plt: Any, view: WorkloadView, sweep: Sweep, path: Path) -> None:
    """Line plot: x = swept param, y = median, one line per variant, min–max
    shaded; one panel per facet."""
    fig, axes = _subplot_grid(plt, len(sweep.facets), 6.4, 4.4)
    for ax, facet in zip(axes, sweep.facets):
        ref_variant = facet.reference_variant
        xs_all: list[float] = []
        ys_all: list[float] = []
        for variant in facet.variants:
            pts = []
            for g in facet.groups:
                rec = next((r for r in g.records if r["variant"] == variant), None)
                if rec is not None:
                    pts.append((g.params[sweep.axis], rec))
            xs = [x for x, _ in pts]
            ys = [r["median"] for _, r in pts]
            label = f"{variant} (ref)" if variant == ref_variant else variant
            (line,) = ax.plot(xs, ys, marker="o", markersize=4, label=label,
                              linewidth=2.2 if variant == ref_variant else 1.4)
            ax.fill_between(xs, [r["min"] for _, r in pts],
                            [r["max"] for _, r in pts],
                            color=line.get_color(), alpha=0.15, linewidth=0)
            xs_all += xs
            ys_all += ys
        if _span_is_large(ys_all):
            ax.set_yscale("log")
        _set_sweep_xscale(ax, xs_all)
        ax.set_xlabel(sweep.axis)
        ax.set_ylabel(metric_unit(view.metric))
        if facet.fixed:
            ax.set_title(fmt_params(facet.fixed), fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(_plot_title(view))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# A bar panel with more bars than this gets wider, fewer panels per row and
# upright value labels (the locks suite compares twenty-odd locks).
MANY_BARS = 8


def plot_bars(plt: Any, view: WorkloadView, path: Path) -> None:
    """Bar chart of medians per variant (min–max as error bars), one panel
    per comparison group; the reference bar is highlighted."""
    most = max(len(g.records) for g in view.groups)
    many = most > MANY_BARS
    fig, axes = _subplot_grid(plt, len(view.groups),
                              max(5.2, 0.38 * most), 4.8 if many else 4.2,
                              max_cols=2 if many else 3)
    for ax, group in zip(axes, view.groups):
        ref = group.reference
        recs = group.records
        medians = [r["median"] for r in recs]
        err = [[max(r["median"] - r["min"], 0) for r in recs],
               [max(r["max"] - r["median"], 0) for r in recs]]
        colors = ["tab:orange" if r is ref else "tab:blue" for r in recs]
        ax.bar(range(len(recs)), medians, yerr=err, color=colors, capsize=3,
               ecolor="0.3")
        for i, r in enumerate(recs):  # the median, just above the max
            ax.annotate(fmt_num(r["median"]), (i, r["max"]), xytext=(0, 3),
                        textcoords="offset points", ha="center",
                        va="bottom", rotation=90 if many else 0,
                        fontsize="x-small" if many else "small")
        ax.set_xticks(range(len(recs)),
                      [f"{r['variant']} (ref)" if r is ref else r["variant"]
                       for r in recs],
                      rotation=30 if not many else 60, ha="right", fontsize="small")
        if _span_is_large(medians):
            ax.set_yscale("log")
        ax.margins(y=0.3 if many else 0.12)  # room for the labels above the bars
        ax.set_ylabel(metric_unit(view.metric))
        ax.set_title(fmt_params(group.params), fontsize="medium")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(_plot_title(view))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_plots(records: Sequence[dict], out_dir: Path) -> dict[tuple, str]:
    """Draw one PNG per (suite, workload, metric) into out_dir; return
    {(suite, workload, metric): file name} for those drawn.  Without
    matplotlib, or when one plot fails, warn and carry on; past
    PLOT_BUDGET_S, warn and draw no more."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        warn(f"matplotlib unavailable ({e}); no plots")
        return {}
    # Plots show medians: not what hung or was skipped, nor the hang-freedom
    # counts (their table says it all).
    records = [r for r in records if is_measured(r) and not is_rounds_record(r)]
    views = workload_views(group_records(records))
    metrics_per_workload: dict[tuple, int] = {}
    for v in views:
        k = (v.suite, v.workload)
        metrics_per_workload[k] = metrics_per_workload.get(k, 0) + 1
    drawn = {}
    start = time.monotonic()
    for k, view in enumerate(views):
        if time.monotonic() - start > PLOT_BUDGET_S:
            warn(f"plots: {PLOT_BUDGET_S} s spent; {len(views) - k} of {len(views)} not drawn")
            break
        name = plot_file_name(view, metrics_per_workload[(view.suite, view.workload)])
        try:
            sweep = find_sweep(view.groups)
            if sweep:
                plot_sweep(plt, view, sweep, out_dir / name)
            else:
                plot_bars(plt, view, out_dir / name)
        except Exception as e:  # a plot is not worth losing the report for
            warn(f"could not draw {name}: {e}")
            plt.close("all")
            continue
        drawn[(view.suite, view.workload, view.metric)] = name
    return drawn


# ---------------------------------------------------------------------------
# Machine information
# ---------------------------------------------------------------------------


def cpu_model() -> str:
    """'model name' from /proc/cpuinfo, else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep and name.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def git_commit(repo: Path) -> str:
    """Short HEAD commit of `repo`, or 'unknown'."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def read_build_info(build_dir: Path) -> dict | str | None:
    """<build-dir>/build_info.json: a dict, its raw text if it is not valid
    JSON (flags containing quotes can do that), or None if absent."""
    path = build_dir / "build_info.json"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        warn(f"{path} is not valid JSON; kept as text")
        return text.strip()


def machine_info(build_dir: Path) -> dict:
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "kernel": platform.release(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(Path(__file__).resolve().parent.parent),
        "build": read_build_info(build_dir),
    }


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


def program_path(build_dir: Path, suite: str) -> Path:
    return build_dir / "bench" / f"{PROGRAM_PREFIX}{suite}"


def choose_suites(build_dir: Path, requested: str | None) -> list[str]:
    """The suites to run; raises ValueError naming a missing program."""
    if requested is None:
        suites = [s for s in KNOWN_SUITES
                  if os.access(program_path(build_dir, s), os.X_OK)]
        if not suites:
            raise ValueError(
                f"no benchmark programs in {build_dir / 'bench'} (looked for "
                f"{', '.join(PROGRAM_PREFIX + s for s in KNOWN_SUITES)}); build "
                "with -DSPINDLE_BUILD_BENCH=ON first")
        return suites
    suites = list(dict.fromkeys(s.strip() for s in requested.split(",") if s.strip()))
    if not suites:
        raise ValueError("--suite names no suite")
    for s in suites:
        prog = program_path(build_dir, s)
        if not prog.is_file():
            raise ValueError(f"suite {s!r}: program {prog} does not exist "
                             "(is the benchmark built?)")
        if not os.access(prog, os.X_OK):
            raise ValueError(f"suite {s!r}: program {prog} is not executable")
    return suites


def suite_budget(suite: str, full: bool, override: float | None) -> float:
    """The time budget of one suite, in seconds."""
    if override is not None:
        return override
    if full:
        return FULL_SUITE_BUDGET_S
    return SUITE_BUDGET_S.get(suite, DEFAULT_SUITE_BUDGET_S)


class Terminated(BaseException):
    """Raised by the SIGTERM and SIGHUP handlers, so that the `finally`
    clauses run: the suite program's process group is killed and the
    temporary directory removed on the way out."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: Any) -> None:
    # Once: a second signal must not cut the clean-up short.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn for the suite program: SIGKILL when bench.py dies, even
    by SIGKILL (PR_SET_PDEATHSIG; it survives the harness's own re-exec).
    Its children are the harness's to bind (they set the same). libc is
    looked up here, in bench.py, so that the forked child only calls it;
    None where it cannot be."""
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_pdeathsig() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # bench.py ended before the prctl
            os.kill(os.getpid(), signal.SIGKILL)
    return set_pdeathsig


def _wait_exit(proc: subprocess.Popen, timeout: float | None) -> bool:
    """Wait until the program (the group's leader) has exited, at most
    `timeout` seconds (None: for ever); do not reap it: while it is a
    zombie its pid, the group's id, cannot be given to another process, so
    that the group can still be killed safely. True if it has exited."""
    if proc.returncode is not None:
        return True
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if fd is not None:
                select.select([fd], [], [], left)
            try:
                if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:  # reaped already
                return True
            if left is not None and left <= 0:
                return False
            if fd is None:
                time.sleep(0.05 if left is None else min(0.05, left))
    finally:
        if fd is not None:
            os.close(fd)


def _killpg(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _end_group(proc: subprocess.Popen) -> None:
    """SIGKILL to whatever is left of the program's process group, then
    reap the leader if it has exited (not waiting for one that would not
    die: _kill_group has waited for it already)."""
    _killpg(proc, signal.SIGKILL)
    if _wait_exit(proc, 0):
        proc.wait()


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the program's process group (the program, and the children
    it forked: a measurement's, the hang-freedom rounds'), SIGKILL after
    KILL_GRACE_S if the program is still there, and give up on it after
    REAP_WAIT_S more (a process stuck in the kernel does not die even of
    SIGKILL): at most KILL_GRACE_S + REAP_WAIT_S seconds."""
    _killpg(proc, signal.SIGTERM)
    if _wait_exit(proc, KILL_GRACE_S):
        return
    _killpg(proc, signal.SIGKILL)
    if not _wait_exit(proc, REAP_WAIT_S):
        warn(f"{Path(proc.args[0]).name} (pid {proc.pid}) did not end {REAP_WAIT_S:g} s after "
             "SIGKILL; going on without it")


def run_suite(prog: Path, out_file: Path, full: bool,
              budget_s: float | None) -> tuple[int, bool]:
    """Run one program within its budget; its stdout and stderr go straight
    to ours. Returns (exit status, whether it was killed at the budget).

    The program runs in a process group of its own so that everything it
    started can be killed together; then it does not see a Ctrl-C at the
    terminal either, so this kills it on the way out (KeyboardInterrupt,
    Terminated). When the program has ended, whatever is left of its group
    is killed too. The program gets SOFT_BUDGET_FRACTION of its budget as
    --time-budget and the whole as --hard-budget (the harness watches no
    measurement past it)."""
    cmd = [str(prog), "--out", str(out_file), "--full" if full else "--quick"]
    if budget_s is not None:
        cmd += ["--time-budget", f"{max(1.0, budget_s * SOFT_BUDGET_FRACTION):g}",
                "--hard-budget", f"{budget_s:g}"]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent())
    except OSError as e:
        warn(f"cannot run {prog}: {e}")
        return 127, False
    timed_out = False
    try:
        if not _wait_exit(proc, budget_s):
            warn(f"{prog.name} overran its budget of {budget_s:g} s: killing it")
            timed_out = True
            _kill_group(proc)
    finally:
        # KeyboardInterrupt or another exception; not again after a kill at
        # the budget, which has waited for the program as long as it may.
        if not timed_out and not _wait_exit(proc, 0):
            _kill_group(proc)
        _end_group(proc)
    code = proc.returncode
    if code is None:  # it would not die (see _kill_group)
        return -signal.SIGKILL, True
    # An exit status, not a signal: it ended by itself, between the budget
    # and the kill (a harness program does not catch SIGTERM).
    return code, timed_out and code < 0


def run_suites(build_dir: Path, suites: Sequence[str], full: bool,
               tmp_dir: Path, budget_override: float | None = None,
               no_budget: bool = False) -> tuple[list[dict], list[str], list[dict]]:
    """Run the suites in order; return (records, record errors, statuses).

    A failed or killed program's records are kept (its report section is
    marked); `statuses` holds per suite: name, program, exit_code,
    elapsed_s, budget_s, records, hung, skipped, timed_out (with
    last_workload, the workload of its last record) and, when the failure
    was not the exit status, error.
    """
    records: list[dict] = []
    errors: list[str] = []
    statuses: list[dict] = []
    for k, suite in enumerate(suites, start=1):
        prog = program_path(build_dir, suite)
        out_file = tmp_dir / f"{suite}.jsonl"
        budget = None if no_budget else suite_budget(suite, full, budget_override)
        print(f"[{k}/{len(suites)}] suite {suite} ..."
              + (f" (budget {budget:g} s)" if budget is not None else ""), flush=True)
        start = time.monotonic()
        code, timed_out = run_suite(prog, out_file, full, budget)
        elapsed = time.monotonic() - start
        status = {"name": suite, "program": str(prog), "exit_code": code,
                  "elapsed_s": round(elapsed, 3), "budget_s": budget, "records": 0,
                  "timed_out": timed_out}
        got: list[dict] = []
        if out_file.exists():
            got, errs = load_jsonl(out_file, cut_short=code != 0 or timed_out)
            errors += errs
            for r in got:
                if r["suite"] != suite:
                    warn(f"{out_file}: a record names suite {r['suite']!r}, "
                         f"not {suite!r}")
                    break
        elif code == 0:
            status["exit_code"] = code = 1
            status["error"] = f"wrote no {out_file.name}"
        status["records"] = len(got)
        status["hung"] = sum(1 for r in got if r.get("status") == "hung")
        status["skipped"] = sum(1 for r in got if r.get("status") == "skipped")
        if timed_out and got:
            status["last_workload"] = got[-1]["workload"]
        records += got
        statuses.append(status)
        if code == 0:
            print(f"[{k}/{len(suites)}] suite {suite} done in {elapsed:.1f} s "
                  f"({len(got)} records, {status['hung']} hung, {status['skipped']} skipped)",
                  flush=True)
        elif timed_out:
            print(f"[{k}/{len(suites)}] suite {suite} TIMED OUT: killed at its budget of "
                  f"{budget:g} s ({len(got)} records kept)", flush=True)
        else:
            what = status.get("error") or f"exited with status {code}"
            print(f"[{k}/{len(suites)}] suite {suite} FAILED after {elapsed:.1f} s: "
                  f"{prog} {what} ({len(got)} records kept)", flush=True)
    return records, errors, statuses


def write_json(path: Path, data: Any) -> None:
    """Pretty-printed JSON, written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run spindle's benchmark suites and write results.json, "
                    "machine.json, report.md and plots.")
    p.add_argument("--build-dir", type=Path,
                   help="CMake build directory holding bench/spindle_bench_<suite> "
                        "(required unless --report-only)")
    p.add_argument("--out", type=Path, required=True,
                   help="output directory, e.g. bench/results/latest")
    p.add_argument("--suite",
                   help="comma-separated suites (default: every one of "
                        f"{', '.join(KNOWN_SUITES)} that is built)")
    p.add_argument("--full", action="store_true",
                   help="run the programs with --full instead of --quick")
    p.add_argument("--suite-budget", type=float, metavar="SECONDS",
                   help="time budget of every suite (default: per suite, "
                        + ", ".join(f"{k} {v} s" for k, v in SUITE_BUDGET_S.items())
                        + f"; {FULL_SUITE_BUDGET_S} s with --full)")
    p.add_argument("--no-budget", action="store_true",
                   help="no time budget: suites run to their end (a hung "
                        "measurement is still stopped by the harness)")
    p.add_argument("--compare", type=Path, metavar="OLD_RESULTS_JSON",
                   help="add the median change against an older results.json")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing; rebuild report.md and plots from "
                        "<out>/results.json")
    args = p.parse_args(argv)
    if not args.report_only and args.build_dir is None:
        p.error("--build-dir is required unless --report-only")
    if args.suite_budget is not None and not args.suite_budget > 0:
        p.error("--suite-budget must be positive")
    return args


def command_line() -> str:
    """The command line as typed, interpreter included."""
    return shlex.join(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM and SIGHUP end the run as a Ctrl-C does: the suite program's
    # process group is killed and the temporary directory removed (bounded:
    # see _kill_group), then bench.py exits 128 + the signal, with no report.
    handlers = {sig: signal.signal(sig, _raise_terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _main(args)
    except Terminated as e:
        warn(f"stopped by {signal.Signals(e.signum).name}: the suite program was killed; no report written")
        return 128 + e.signum
    except KeyboardInterrupt:
        warn("interrupted: the suite program was killed; no report written")
        return 128 + signal.SIGINT
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _main(args: argparse.Namespace) -> int:
    out_dir: Path = args.out
    errors: list[str] = []
    failed = False

    if args.report_only:
        results = out_dir / "results.json"
        if not results.is_file():
            warn(f"--report-only: {results} does not exist")
            return EXIT_USAGE
        try:
            records, errors = load_results_json(results)
        except (OSError, ValueError) as e:
            warn(f"--report-only: cannot read {results}: {e}")
            return EXIT_USAGE
        machine_path = out_dir / "machine.json"
        machine = {}
        if machine_path.is_file():
            try:
                machine = json.loads(machine_path.read_text(encoding="utf-8"))
            except ValueError as e:
                warn(f"{machine_path}: not valid JSON ({e}); header left blank")
        if not isinstance(machine, dict):
            machine = {}
        regenerated_by = command_line()
    else:
        build_dir: Path = args.build_dir
        try:
            suites = choose_suites(build_dir, args.suite)
        except ValueError as e:
            warn(str(e))
            return EXIT_USAGE
        out_dir.mkdir(parents=True, exist_ok=True)
        run_start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="spindle-bench-") as tmp:
            records, errors, statuses = run_suites(build_dir, suites, args.full,
                                                   Path(tmp), args.suite_budget,
                                                   args.no_budget)
        failed = any(s["exit_code"] != 0 for s in statuses)
        machine = machine_info(build_dir)
        budgets = [s["budget_s"] for s in statuses]
        machine["run"] = {"command": command_line(), "cwd": os.getcwd(),
                          "mode": "full" if args.full else "quick",
                          "elapsed_s": round(time.monotonic() - run_start, 1),  # the suites
                          "budget_s": None if None in budgets else sum(budgets),
                          "suites": statuses}
        write_json(out_dir / "results.json", records)
        write_json(out_dir / "machine.json", machine)
        regenerated_by = None

    compare = None
    if args.compare is not None:
        try:
            old, old_errors = load_results_json(args.compare)
        except (OSError, ValueError) as e:
            warn(f"--compare: cannot read {args.compare}: {e}")
            return EXIT_USAGE
        for e in old_errors:
            warn(f"--compare: skipped {e}")
        compare = (old, str(args.compare))

    for e in errors:
        warn(f"malformed record skipped: {e}")

    plots = make_plots(records, out_dir)
    report = render_report(records, machine, plots, compare, regenerated_by)
    (out_dir / "report.md").write_text(report, encoding="utf-8")
    print(f"wrote {out_dir / 'report.md'} ({len(records)} records, "
          f"{len(plots)} plots)", flush=True)
    target_results = check_targets(records)
    if target_results:
        met = sum(1 for r in target_results if r.met)
        print(f"targets (report.md, \"Targets\"): {met} of {len(target_results)} met", flush=True)
        for r in target_results:
            if not r.met:
                what = "not measured" if r.params is None else (
                    f"{fmt_params(r.params)}: not measured ({r.blocked})" if r.blocked else
                    f"{fmt_params(r.params)}: {fmt_num(r.value) if r.value is not None else '-'}, "
                    f"target {r.target.op} {fmt_num(r.target.bound)}")
                print(f"  #{r.target.issue} {r.target.goal}: {what}", flush=True)

    if failed:
        warn("some suites failed; see above")
    if failed or errors:
        return EXIT_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
