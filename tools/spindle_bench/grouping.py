"""Comparison groups, their references and ratios, workload views and
sweeps (see the package's "Report rules")."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Sequence

from .records import is_measured


# A workload is shown as a sweep (wide table + line plot) only when each panel
# has at least this many values of the swept parameter; below that, per-group
# tables read just as well.
MIN_SWEEP_POINTS = 3


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
