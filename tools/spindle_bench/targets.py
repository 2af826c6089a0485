"""The goals the project sets for its benchmarks, and their check against
a run's records."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from .grouping import group_records
from .records import is_measured


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
