"""Numbers, units, parameters and Markdown tables as the report and the
plots print them."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

from .grouping import WorkloadView


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
