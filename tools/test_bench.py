"""Unit tests of tools/bench.py (the package tools/spindle_bench/): its report
logic and driver, on fake records.

Run from the repository root:

    /usr/bin/python3 -m unittest tools/test_bench.py

Everything is written under temporary directories; the end-to-end tests run
bench.py on small shell scripts posing as suite programs.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
BENCH_PY = TOOLS / "bench.py"
REPO = TOOLS.parent

try:  # the plots need it; Debian's /usr/bin/python3 has it (python3-matplotlib)
    import matplotlib  # noqa: F401
    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False

# The tool's package, tools/spindle_bench/, with its folder first on the
# path, as bench.py puts it (the repository's bench/ folder must not be what
# an import finds). A test names each function by its module
# (bench.grouping.find_sweep), so that one that changes a module's constant
# changes the one the code reads.
sys.path.insert(0, str(TOOLS))
import spindle_bench as bench  # noqa: E402
import spindle_bench.formatting  # noqa: E402,F401
import spindle_bench.grouping  # noqa: E402,F401
import spindle_bench.plots  # noqa: E402,F401
import spindle_bench.records  # noqa: E402,F401
import spindle_bench.report  # noqa: E402,F401
import spindle_bench.runner  # noqa: E402,F401
import spindle_bench.targets  # noqa: E402,F401


def rec(variant: str, median: float, *, suite: str = "switch",
        workload: str = "yield", params: dict | None = None,
        metric: str = "ns_per_op", higher_is_better: bool = False,
        **extra) -> dict:
    """A valid record with min/max around the median."""
    r = {"suite": suite, "workload": workload, "variant": variant,
         "params": {"fibers": 10, "workers": 1} if params is None else params,
         "metric": metric, "higher_is_better": higher_is_better,
         "median": median, "min": median * 0.9, "max": median * 1.1, "reps": 5}
    r.update(extra)
    return r


def not_measured(variant: str, status: str = "hung",
                 reason: str = "no result within 10 s (its measurement 2 of 6)",
                 **kw) -> dict:
    """A record of a variant that hung or was skipped, as the harness writes
    it: no median, min, max or reps."""
    r = rec(variant, 1.0, **kw)
    for name in ("median", "min", "max", "reps"):
        del r[name]
    r.update(status=status, reason=reason)
    return r


def rounds_rec(variant: str, rounds: int, finished: int, hung: int,
               primitive: str = "semaphore", note: str | None = None) -> dict:
    """A hang-freedom record: rounds finished of rounds attempted."""
    r = rec(variant, float(finished), suite="cqs", workload="hang_freedom",
            params={"primitive": primitive, "actors": 8}, metric="rounds_finished",
            higher_is_better=True, hung_rounds=hung, round_budget_ms=2000)
    r.update(min=finished, max=finished, reps=rounds)
    if note:
        r["note"] = note
    return r


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _assert_ends(test: unittest.TestCase, pid: int, what: str) -> None:
    """Fail unless process `pid` is gone within a generous while."""
    deadline = time.monotonic() + 60
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    test.assertFalse(_alive(pid), f"{what} (pid {pid}) is still running")


def hanoi_records() -> list[dict]:
    """A sweep over disks 1..6 with three variants."""
    out = []
    for disks in range(1, 7):
        p = {"disks": disks}
        out += [rec("spindle", 2.0 * disks, workload="hanoi", params=p),
                rec("boost_context", 4.0 * disks, workload="hanoi", params=p),
                rec("cxx20_stackless", 1.0 * disks ** 3, workload="hanoi", params=p)]
    return out


def write_program(path: Path, body: str) -> None:
    """Write an executable /bin/sh script; `$OUT` is the --out file, `$MODE`
    --quick or --full, `$BUDGET` the --time-budget, `$HARD` the
    --hard-budget."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n"
                    "# Fake suite program: bench.py passes --out FILE --quick|--full\n"
                    "# [--time-budget SECONDS --hard-budget SECONDS].\n"
                    'OUT=""; MODE=""; BUDGET=""; HARD=""\n'
                    'while [ $# -gt 0 ]; do\n'
                    '  case "$1" in --out) OUT="$2"; shift 2;;\n'
                    '    --time-budget) BUDGET="$2"; shift 2;;\n'
                    '    --hard-budget) HARD="$2"; shift 2;; *) MODE="$1"; shift;; esac\n'
                    'done\n' + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class ValidationTest(unittest.TestCase):
    def test_valid_record(self):
        self.assertIsNone(bench.records.validate_record(rec("spindle", 2.0)))
        self.assertIsNone(bench.records.validate_record(
            rec("spindle", 2.0, samples=[1.9, 2.0], note="x", reference=True)))

    def test_missing_and_bad_fields(self):
        r = rec("spindle", 2.0)
        del r["reps"]
        self.assertIn("reps", bench.records.validate_record(r))
        self.assertIn("higher_is_better", bench.records.validate_record(
            rec("spindle", 2.0, higher_is_better="no")))
        self.assertIn("samples", bench.records.validate_record(
            rec("spindle", 2.0, samples=["a"])))
        self.assertIn("min <= median", bench.records.validate_record(
            dict(rec("spindle", 2.0), min=3.0)))
        self.assertIn("baseline", bench.records.validate_record(rec("std", 2.0, baseline="")))
        self.assertIn("baseline", bench.records.validate_record(rec("std", 2.0, baseline=1)))
        self.assertIsNone(bench.records.validate_record(rec("std", 2.0, baseline="spindle_thread")))
        self.assertIsNotNone(bench.records.validate_record([1, 2]))

    def test_jsonl_reports_file_and_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "s.jsonl"
            path.write_text(json.dumps(rec("spindle", 2.0)) + "\n"
                            "{not json\n"
                            "\n"
                            + json.dumps({"suite": "switch"}) + "\n"
                            + '{"median": NaN}\n'
                            + json.dumps(rec("boost_context", 3.0)) + "\n")
            records, errors = bench.records.load_jsonl(path)
        self.assertEqual([r["variant"] for r in records], ["spindle", "boost_context"])
        self.assertEqual(len(errors), 3)
        self.assertTrue(errors[0].startswith(f"{path}:2:"), errors[0])
        self.assertTrue(errors[1].startswith(f"{path}:4:"), errors[1])
        self.assertIn("missing field", errors[1])
        self.assertTrue(errors[2].startswith(f"{path}:5:"), errors[2])


class GroupingTest(unittest.TestCase):
    def test_groups_by_suite_workload_params_metric(self):
        records = [
            rec("spindle", 2.0),
            rec("boost_context", 3.0, params={"workers": 1, "fibers": 10}),  # same params, other key order
            rec("spindle", 5.0, params={"fibers": 20, "workers": 1}),
            rec("spindle", 7.0, workload="sum"),
            rec("spindle", 9.0, suite="ces"),
            rec("spindle", 0.1, metric="l1_miss_rate"),
        ]
        groups = bench.grouping.group_records(records)
        self.assertEqual(len(groups), 5)
        self.assertEqual([r["variant"] for r in groups[0].records],
                         ["spindle", "boost_context"])
        views = bench.grouping.workload_views(groups)
        self.assertEqual([(v.suite, v.workload, v.metric, len(v.groups)) for v in views],
                         [("switch", "yield", "ns_per_op", 2), ("switch", "sum", "ns_per_op", 1),
                          ("ces", "yield", "ns_per_op", 1), ("switch", "yield", "l1_miss_rate", 1)])

    def test_canonical_params(self):
        self.assertEqual(bench.grouping.canonical_params({"a": 1, "b": {"y": 2, "x": 1}}),
                         bench.grouping.canonical_params({"b": {"x": 1, "y": 2}, "a": 1}))


class ReferenceTest(unittest.TestCase):
    def test_explicit_reference_wins(self):
        records = [rec("spindle", 1.0), rec("callback", 0.5, reference=True),
                   rec("boost_context", 2.0)]
        self.assertEqual(bench.grouping.select_reference(records)["variant"], "callback")

    def test_first_spindle_variant(self):
        records = [rec("std_mutex", 1.0), rec("spindle_dispatch", 2.0),
                   rec("spindle_ces", 3.0)]
        self.assertEqual(bench.grouping.select_reference(records)["variant"], "spindle_dispatch")

    def test_first_record_otherwise(self):
        records = [rec("tas", 1.0), rec("mcs", 2.0)]
        self.assertEqual(bench.grouping.select_reference(records)["variant"], "tas")

    def test_reference_false_is_ignored(self):
        records = [rec("tas", 1.0, reference=False), rec("spindle", 2.0)]
        self.assertEqual(bench.grouping.select_reference(records)["variant"], "spindle")


class RatioTest(unittest.TestCase):
    def test_lower_is_better(self):
        ref, row = rec("spindle", 2.0), rec("boost_context", 6.0)
        self.assertAlmostEqual(bench.grouping.ratio_to_reference(row, ref, False), 3.0)
        self.assertAlmostEqual(bench.grouping.ratio_to_reference(ref, ref, False), 1.0)

    def test_higher_is_better(self):
        ref = rec("spindle_ces", 8.0e6, metric="ops_per_s", higher_is_better=True)
        row = rec("spindle_dispatch", 1.0e6, metric="ops_per_s", higher_is_better=True)
        self.assertAlmostEqual(bench.grouping.ratio_to_reference(row, ref, True), 8.0)

    def test_zero_is_undefined(self):
        self.assertIsNone(bench.grouping.ratio_to_reference(rec("a", 1.0), rec("b", 0.0), False))
        self.assertEqual(bench.formatting.fmt_ratio(None), "—")

    def test_formatting(self):
        self.assertEqual(bench.formatting.fmt_ratio(2.3149), "2.31×")
        self.assertEqual(bench.formatting.fmt_ratio(1.0, True), "1.00× (ref)")
        self.assertEqual(bench.formatting.fmt_ratio(49.96), "50.0×")

    def test_units(self):
        self.assertEqual(bench.formatting.metric_unit("ns_per_op"), "ns/op")
        self.assertEqual(bench.formatting.metric_unit("ops_per_s"), "ops/s")
        self.assertEqual(bench.formatting.metric_unit("bytes"), "bytes")
        self.assertEqual(bench.formatting.metric_unit("ns_per_yield"), "ns/yield")
        self.assertEqual(bench.formatting.metric_unit("ratio_to_baseline"), "ratio_to_baseline")

    def test_group_table(self):
        groups = bench.grouping.group_records([
            rec("boost_context", 6.0), rec("spindle", 2.0, note="stack randomized"),
            rec("callback", 1.0)])
        text = "\n".join(bench.report.render_group_table(groups[0]))
        self.assertIn("| variant | median | min | max | reps | ratio |", text)
        self.assertIn("| boost_context | 6.00 | 5.40 | 6.60 | 5 | 3.00× |", text)
        self.assertIn("| spindle | 2.00 | 1.80 | 2.20 | 5 | 1.00× (ref) |", text)
        self.assertIn("| callback | 1.00 | 0.900 | 1.10 | 5 | 0.50× |", text)
        self.assertIn("- spindle: stack randomized", text)
        self.assertIn("ns/op, lower is better", text)

    def test_group_table_higher_is_better(self):
        kw = dict(workload="mutex", suite="ces", params={"workers": 4},
                  metric="ops_per_s", higher_is_better=True)
        groups = bench.grouping.group_records([rec("spindle_dispatch", 1.0e5, **kw),
                                      rec("spindle_ces", 8.0e5, reference=True, **kw)])
        text = "\n".join(bench.report.render_group_table(groups[0]))
        self.assertIn("| spindle_dispatch | 100,000 | 90,000 | 110,000 | 5 | 8.00× |", text)
        self.assertIn("| spindle_ces | 800,000 | 720,000 | 880,000 | 5 | 1.00× (ref) |", text)


class BaselineTest(unittest.TestCase):
    """A row may name the variant its ratio is computed against."""

    KW = dict(suite="cqs", workload="barrier", params={"parties": 4})

    def test_select_baseline(self):
        ref, thr = rec("spindle_fiber", 1.0, **self.KW), rec("spindle_thread", 2.0, **self.KW)
        std = rec("std_barrier", 6.0, baseline="spindle_thread", **self.KW)
        lone = rec("boost_fiber", 3.0, baseline="nowhere", **self.KW)
        records = [ref, thr, std, lone]
        self.assertIs(bench.grouping.select_baseline(std, records, ref), thr)
        self.assertIs(bench.grouping.select_baseline(thr, records, ref), ref)
        self.assertIs(bench.grouping.select_baseline(lone, records, ref), ref)

    def test_group_table(self):
        groups = bench.grouping.group_records([
            rec("spindle_fiber", 1.0, **self.KW), rec("spindle_thread", 2.0, **self.KW),
            rec("std_barrier", 6.0, baseline="spindle_thread", **self.KW),
            rec("boost_fiber", 3.0, baseline="spindle_fiber", **self.KW),
            rec("pthread", 8.0, baseline="gone", **self.KW)])
        text = "\n".join(bench.report.render_group_table(groups[0]))
        self.assertIn("| spindle_fiber | 1.00 | 0.900 | 1.10 | 5 | 1.00× (ref) |", text)
        self.assertIn("| spindle_thread | 2.00 | 1.80 | 2.20 | 5 | 2.00× |", text)
        self.assertIn("| std_barrier | 6.00 | 5.40 | 6.60 | 5 | 3.00× (vs spindle_thread) |", text)
        self.assertIn("| boost_fiber | 3.00 | 2.70 | 3.30 | 5 | 3.00× |", text)
        self.assertIn("| pthread | 8.00 | 7.20 | 8.80 | 5 | 8.00× |", text)
        self.assertIn("pthread: baseline gone is not in this comparison", text)

    def test_sweep_table(self):
        records = []
        for p in (2, 4, 8):
            kw = dict(suite="cqs", workload="semaphore", metric="ops_per_s",
                      higher_is_better=True, params={"threads": p})
            records += [rec("spindle_fiber", 8.0 * p, **kw),
                        rec("spindle_thread", 4.0 * p, **kw),
                        rec("std_counting_semaphore", 2.0 * p, baseline="spindle_thread", **kw)]
        del records[7]  # spindle_thread at threads=8: no baseline there
        view = bench.grouping.workload_views(bench.grouping.group_records(records))[0]
        text = "\n".join(bench.report.render_view(view, None))
        self.assertIn("| threads | spindle_fiber | spindle_thread | std_counting_semaphore | "
                      "spindle_fiber vs spindle_thread | spindle_thread vs std_counting_semaphore |",
                      text)
        self.assertIn("| 2 | 16.00 | 8.00 | 4.00 | 2.00× | 2.00× |", text)
        self.assertIn("| 8 | 64.00 | — | 16.00 | — | — |", text)
        self.assertIn("a column `A vs B`", text)


class SweepTest(unittest.TestCase):
    def test_one_param_sweep_detected(self):
        sweep = bench.grouping.find_sweep(bench.grouping.group_records(hanoi_records()))
        self.assertIsNotNone(sweep)
        self.assertEqual(sweep.axis, "disks")
        self.assertEqual(len(sweep.facets), 1)
        self.assertEqual([g.params["disks"] for g in sweep.facets[0].groups],
                         [1, 2, 3, 4, 5, 6])

    def test_not_a_sweep(self):
        # Too few points.
        self.assertIsNone(bench.grouping.find_sweep(bench.grouping.group_records(
            [r for r in hanoi_records() if r["params"]["disks"] <= 2])))
        # A string parameter varies.
        self.assertIsNone(bench.grouping.find_sweep(bench.grouping.group_records(
            [rec("spindle", 1.0, params={"mode": m}) for m in "abc"])))
        # Different parameter names.
        self.assertIsNone(bench.grouping.find_sweep(bench.grouping.group_records(
            [rec("spindle", 1.0, params={"x": 1}), rec("spindle", 1.0, params={"x": 2}),
             rec("spindle", 1.0, params={"y": 3})])))

    def test_two_param_sweep_facets(self):
        records = [rec(v, float(t * p), workload="semaphore", suite="cqs",
                       params={"permits": p, "threads": t})
                   for p in (1, 2) for t in (1, 2, 4, 8) for v in ("spindle", "std")]
        sweep = bench.grouping.find_sweep(bench.grouping.group_records(records))
        self.assertEqual(sweep.axis, "threads")
        self.assertEqual([f.fixed for f in sweep.facets], [{"permits": 1}, {"permits": 2}])

    def test_wide_table(self):
        records = hanoi_records()
        records[0]["note"] = "one disk is trivial"
        view = bench.grouping.workload_views(bench.grouping.group_records(records))[0]
        text = "\n".join(bench.report.render_view(view, "switch_hanoi.png"))
        self.assertEqual(text.count("| disks |"), 1, text)  # one table, not six
        self.assertIn("| disks | spindle | boost_context | cxx20_stackless | "
                      "spindle vs boost_context | spindle vs cxx20_stackless |", text)
        # disks=5: spindle 10, boost 20, cxx20 125 -> 2.00×, 12.5×
        self.assertIn("| 5 | 10.00 | 20.00 | 125.0 | 2.00× | 12.5× |", text)
        self.assertIn("- spindle (disks=1): one disk is trivial", text)
        self.assertIn("![switch hanoi: ns_per_op](switch_hanoi.png)", text)
        self.assertNotIn("| variant | median |", text)

    def test_fractional_axis_with_facets(self):
        # ces/rw: writer_pct 50, 25, 12.5, 6.25 (ints and floats mixed in
        # JSON) per worker count; ratios of spindle_ces to every other variant.
        records = []
        for w in (1, 2):
            for pct in (50, 25, 12.5, 6.25):
                p = {"tasks": 5000, "workers": w, "iterations": 6, "writer_pct": pct}
                records += [rec(v, m * w, suite="ces", workload="rw", params=p,
                                metric="ops_per_s", higher_is_better=True,
                                **({"reference": True} if v == "spindle_ces" else {}))
                            for v, m in (("spindle_ces", 300.0), ("spindle_dispatch", 200.0),
                                         ("spindle_inline", 100.0), ("std_shared_mutex", 150.0))]
        view = bench.grouping.workload_views(bench.grouping.group_records(records))[0]
        sweep = bench.grouping.find_sweep(view.groups)
        self.assertEqual(sweep.axis, "writer_pct")
        self.assertEqual([f.fixed for f in sweep.facets], [{"workers": 1}, {"workers": 2}])
        self.assertEqual([g.params["writer_pct"] for g in sweep.facets[0].groups],
                         [6.25, 12.5, 25, 50])
        text = "\n".join(bench.report.render_view(view, None))
        self.assertIn("| writer_pct | spindle_ces | spindle_dispatch | spindle_inline | "
                      "std_shared_mutex | spindle_ces vs spindle_dispatch | "
                      "spindle_ces vs spindle_inline | spindle_ces vs std_shared_mutex |", text)
        self.assertIn("| 6.25 | 600.0 | 400.0 | 200.0 | 300.0 | 1.50× | 3.00× | 2.00× |", text)
        self.assertIn("| 50 | 300.0 | 200.0 | 100.0 | 150.0 | 1.50× | 3.00× | 2.00× |", text)

    def test_sweep_with_missing_variant(self):
        records = [r for r in hanoi_records()
                   if not (r["variant"] == "boost_context" and r["params"]["disks"] == 3)]
        view = bench.grouping.workload_views(bench.grouping.group_records(records))[0]
        text = "\n".join(bench.report.render_view(view, None))
        self.assertIn("| 3 | 6.00 | — | 27.00 | — | 4.50× |", text)


class ReportTest(unittest.TestCase):
    def test_full_report(self):
        records = [rec("spindle", 2.0), rec("boost_context", 6.0)] + hanoi_records()
        machine = {"cpu_model": "Fake CPU 9000", "logical_cpus": 8, "kernel": "6.1.0",
                   "date": "2025-01-01T00:00:00+00:00", "git_commit": "abc1234",
                   "build": {"compiler": "GNU 12.2.0", "build_type": "Release",
                             "flags": " -O3 -DNDEBUG", "sanitizer": ""},
                   "run": {"command": "/usr/bin/python3 tools/bench.py --out x",
                           "mode": "quick",
                           "suites": [{"name": "switch", "exit_code": 0,
                                       "elapsed_s": 1.5, "records": 20}]}}
        text = bench.report.render_report(records, machine)
        for needle in ("# spindle benchmark report", "Fake CPU 9000", "GNU 12.2.0",
                       "-O3 -DNDEBUG", "/usr/bin/python3 tools/bench.py --out x",
                       "## Suite `switch`", "### yield", "### hanoi", "| switch | ok |"):
            self.assertIn(needle, text)
        self.assertLess(text.index("### yield"), text.index("### hanoi"))

    def test_comparison(self):
        old = [rec("spindle", 2.0), rec("boost_context", 6.0), rec("gone", 1.0),
               rec("spindle_ces", 1e6, workload="mutex", metric="ops_per_s",
                   higher_is_better=True)]
        new = [rec("spindle", 1.0), rec("boost_context", 6.05), rec("fresh", 1.0),
               rec("spindle_ces", 1.5e6, workload="mutex", metric="ops_per_s",
                   higher_is_better=True)]
        text = "\n".join(bench.report.render_comparison(new, old, "old/results.json"))
        self.assertIn("| spindle | ns/op | 2.00 | 1.00 | -50.0% | better |", text)
        self.assertIn("| boost_context | ns/op | 6.00 | 6.05 | +0.8% | ≈ |", text)
        self.assertIn("| spindle_ces | ops/s | 1,000,000 | 1,500,000 | +50.0% | better |", text)
        self.assertIn("3 records matched: 2 better, 0 worse", text)
        self.assertIn("1 only in this run, 1 only in the old one", text)
        self.assertIn("- switch / yield / gone / fibers=10, workers=1 / ns_per_op", text)

    def test_comparison_summarizes_suites_not_run(self):
        old = [rec("spindle", 2.0)] + [rec("spindle", float(i), suite="ces",
                                          params={"workers": i}) for i in range(1, 50)]
        text = "\n".join(bench.report.render_comparison([rec("spindle", 2.0)], old, "o.json"))
        self.assertIn("49 only in the old one", text)
        self.assertNotIn("- ces /", text)
        self.assertIn("suites this run did not run: ces.", text)


class TargetTest(unittest.TestCase):
    def test_ratio_of_medians_met_and_missed(self):
        records = [rec("spindle", 2.0, workload="sum", params={"values": 10}),
                   rec("cxx20_stackless", 1.0, workload="sum", params={"values": 10}),
                   rec("spindle", 1.2, params={"fibers": 10, "workers": 1}),
                   rec("boost_context", 6.0, params={"fibers": 10, "workers": 1})]
        results = {r.target.goal: r for r in bench.targets.check_targets(records)}
        sum_r = next(r for g, r in results.items() if g.startswith("sum of sequence"))
        self.assertAlmostEqual(sum_r.value, 2.0)
        self.assertIs(sum_r.met, False)  # 2.0 > 1.3
        ring = next(r for g, r in results.items() if g.startswith("yield ring: Boost"))
        self.assertAlmostEqual(ring.value, 5.0)
        self.assertIs(ring.met, True)
        absolute = next(r for g, r in results.items() if g.startswith("yield ring: ns"))
        self.assertAlmostEqual(absolute.value, 1.2)
        self.assertIs(absolute.met, True)
        # A switch target with no record in this run: not measured.
        hanoi = next(r for g, r in results.items() if g.startswith("Hanoi(20): Boost"))
        self.assertIsNone(hanoi.params)
        self.assertIsNone(hanoi.met)
        # Targets of suites that did not run are left out.
        self.assertFalse(any(r.target.suite == "cqs" for r in results.values()))

    def test_where_and_worst(self):
        def abort(q, growth):
            return rec("spindle_simple", growth, suite="cqs", workload="abort",
                       params={"queued": q, "waiter": "fiber"}, metric="growth_from_empty")
        sem = dict(suite="cqs", workload="semaphore", metric="ops_per_s", higher_is_better=True)
        records = [abort(0, 1.0), abort(1000, 1.7), abort(100000, 1.1),
                   rec("spindle_fiber", 3.0, params={"permits": 1, "threads": 4}, **sem),
                   rec("std_counting_semaphore", 1.0, params={"permits": 1, "threads": 4}, **sem),
                   rec("spindle_fiber", 1.0, params={"permits": 4, "threads": 2}, **sem),
                   rec("std_counting_semaphore", 1.1, params={"permits": 4, "threads": 2}, **sem)]
        results = bench.targets.check_targets(records)
        growth = [r for r in results if r.target.metric == "growth_from_empty"
                  and r.target.variant == "spindle_simple"]
        self.assertEqual(len(growth), 1)
        self.assertEqual(growth[0].params["queued"], 1000)  # the worst point
        self.assertEqual(growth[0].points, 3)
        self.assertIs(growth[0].met, False)
        contended = [r for r in results if r.target.goal.startswith("semaphore, threads > permits")]
        self.assertEqual([r.params["threads"] for r in contended], [4])
        self.assertIs(contended[0].met, True)  # 3.0 >= 2
        uncontended = [r for r in results if r.target.goal.startswith("semaphore, threads <= permits")
                       and r.target.variant == "spindle_fiber"]
        self.assertEqual([r.params["permits"] for r in uncontended], [4])
        self.assertIs(uncontended[0].met, False)  # 1.0 / 1.1

    def test_report_section(self):
        records = [rec("spindle", 1.0, workload="sum", params={"values": 10}),
                   rec("cxx20_stackless", 1.0, workload="sum", params={"values": 10})]
        text = bench.report.render_report(records, {})
        self.assertIn("## Targets", text)
        self.assertIn("| #2 | sum of sequence", text)
        self.assertIn("| met |", text)
        self.assertIn("| not measured |", text)
        self.assertLess(text.index("## Targets"), text.index("## Suite `switch`"))
        self.assertNotIn("## Targets", bench.report.render_report(
            [rec("x", 1.0, suite="ces", workload="mutex")], {}))


class TargetsFileTest(unittest.TestCase):
    """tools/spindle_bench/targets.toml: it loads, each target names what
    its suite program reports, and the loader refuses a broken entry."""

    def test_file_loads(self):
        targets = bench.targets.load_targets()
        self.assertEqual(targets, bench.targets.TARGETS)
        self.assertGreaterEqual(len(targets), 18)
        for t in targets:
            self.assertIn(t.suite, bench.runner.KNOWN_SUITES, t.goal)
            self.assertIn(t.op, (">=", ">", "<="), t.goal)
            self.assertIsInstance(t.bound, float, t.goal)
            self.assertNotEqual(t.variant, t.over, t.goal)
        self.assertEqual(len({t.goal for t in targets if not t.where}
                             | {(t.goal, t.where) for t in targets if t.where}),
                         len(targets), "two targets with the same goal and points")

    def test_each_target_names_what_its_program_reports(self):
        # The suite program writes the workload, metric, variant names and
        # params as string literals (bench/<suite>/*.cpp).
        for t in bench.targets.TARGETS:
            src = "".join(f.read_text(encoding="utf-8")
                          for f in sorted((REPO / "bench" / t.suite).glob("*.cpp")))
            self.assertTrue(src, f"no bench/{t.suite}/*.cpp")
            names = [t.workload, t.metric, t.variant] + ([t.over] if t.over else [])
            if t.where:
                names += [w for w in t.where.split() if w[0].isalpha()]
            for name in names:
                self.assertTrue(f'"{name}"' in src,  # not assertIn: it prints the source
                                f"{t.goal}: bench/{t.suite} never names {name!r}")

    def test_a_stored_run_measures_every_target(self):
        # The newest snapshot under bench/results/ that ran a target's suite
        # has at least one point of it, found the way the report finds it.
        runs = sorted((REPO / "bench" / "results").glob("*/results.json"), reverse=True)
        self.assertTrue(runs, "no stored run under bench/results/")
        loaded = [bench.records.load_results_json(r)[0] for r in runs]
        for t in bench.targets.TARGETS:
            run = next((recs for recs in loaded if any(r["suite"] == t.suite for r in recs)),
                       None)
            if run is None:
                continue  # no stored run of that suite
            results = [r for r in bench.targets.check_targets(run, [t]) if r.params is not None]
            self.assertTrue(results, f"{t.goal}: no point in the newest stored {t.suite} run")
            for r in results:
                self.assertTrue(t.applies(r.params), t.goal)

    def test_conditions(self):
        cond = bench.targets.parse_condition
        self.assertTrue(cond("threads <= permits")({"threads": 4, "permits": 4}))
        self.assertFalse(cond("threads <= permits")({"threads": 8, "permits": 4}))
        self.assertTrue(cond("threads > permits")({"threads": 1}))  # permits: 0
        self.assertTrue(cond("disks == 20")({"disks": 20}))
        self.assertFalse(cond("disks == 20")({}))
        self.assertTrue(cond("ratio < 0.5")({"ratio": 0.25}))
        for bad in ("disks = 20", "disks == ", "20 == disks", "disks == 20 and x", ""):
            with self.assertRaises(ValueError, msg=bad):
                cond(bad)

    def test_broken_entries_are_refused(self):
        good = ('issue = 2\ngoal = "g"\nsuite = "switch"\nworkload = "yield"\n'
                'metric = "ns_per_op"\nvariant = "spindle"\nop = "<="\nbound = 2\n')
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.toml"
            path.write_text("[[target]]\n" + good, encoding="utf-8")
            (t,) = bench.targets.load_targets(path)
            self.assertEqual(t.bound, 2.0)
            self.assertIsInstance(t.bound, float)
            self.assertIsNone(t.over)
            self.assertFalse(t.worst)
            for extra, says in (('op = "<"', "'op' must be one of"),
                                ('colour = "red"', "unknown key(s) colour"),
                                ('where = "disks is 20"', "is not '<param> <op>"),
                                ('worst = 1', "'worst' must be true or false"),
                                ('bound = nan', "'bound' must be a finite number")):
                body = good.replace('op = "<="\n', "") if extra.startswith("op") else good
                body = body.replace("bound = 2\n", "") if extra.startswith("bound") else body
                path.write_text("[[target]]\n" + body + extra + "\n", encoding="utf-8")
                with self.assertRaises(ValueError) as e:
                    bench.targets.load_targets(path)
                self.assertIn(f"{path}: target 1 ('g'): ", str(e.exception))
                self.assertIn(says, str(e.exception))
            path.write_text("[[target]]\n" + good.replace('variant = "spindle"\n', ""),
                            encoding="utf-8")
            with self.assertRaisesRegex(ValueError, "missing 'variant'"):
                bench.targets.load_targets(path)
            path.write_text("[target\n", encoding="utf-8")
            with self.assertRaisesRegex(ValueError, str(path)):
                bench.targets.load_targets(path)


class PlotTest(unittest.TestCase):
    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed for this python3")
    def test_pngs_written(self):
        records = ([rec("spindle", 2.0), rec("boost_context", 6.0),
                    rec("spindle", 3.0, params={"fibers": 100, "workers": 1}),
                    rec("boost_context", 9.0, params={"fibers": 100, "workers": 1})]
                   + hanoi_records()
                   + [rec("spindle", 0.1, metric="l1_miss_rate")]
                   + [rec("spindle", 1.0 + q, suite="cqs", workload="abort",
                          params={"queued": q}) for q in (0, 10, 1000, 100000)]
                   + [rec(v, 1e5 * w * f, suite="ces", workload="mutex",
                          metric="ops_per_s", higher_is_better=True,
                          params={"workers": w})
                      for w in (1, 2, 4, 8, 16, 32, 64, 128, 256)
                      for v, f in (("spindle_ces", 8), ("spindle_dispatch", 1))])
        with tempfile.TemporaryDirectory() as d:
            plots = bench.plots.make_plots(records, Path(d))
            names = sorted(plots.values())
            self.assertEqual(names, ["ces_mutex.png", "cqs_abort.png", "switch_hanoi.png",
                                     "switch_yield_l1_miss_rate.png",
                                     "switch_yield_ns_per_op.png"])
            for name in names:
                path = Path(d) / name
                self.assertTrue(path.is_file(), name)
                self.assertGreater(path.stat().st_size, 1000, name)
                self.assertEqual(path.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed for this python3")
    def test_plots_stop_past_their_budget(self):
        saved = bench.plots.PLOT_BUDGET_S
        bench.plots.PLOT_BUDGET_S = -1  # spent before the first
        try:
            with tempfile.TemporaryDirectory() as d:
                self.assertEqual(bench.plots.make_plots(hanoi_records(), Path(d)), {})
                self.assertEqual(list(Path(d).iterdir()), [])
        finally:
            bench.plots.PLOT_BUDGET_S = saved

    def test_file_names_are_safe(self):
        view = bench.grouping.WorkloadView("ces", "cs-length", "ops_per_s", [])
        self.assertEqual(bench.formatting.plot_file_name(view, 1), "ces_cs-length.png")
        view = bench.grouping.WorkloadView("ces", "a/b c", "ops_per_s", [])
        self.assertEqual(bench.formatting.plot_file_name(view, 1), "ces_a_b_c.png")


class StatusRecordTest(unittest.TestCase):
    """Records of variants that hung or were skipped, and hang-freedom rounds."""

    SEM = dict(suite="cqs", workload="semaphore", metric="ops_per_s", higher_is_better=True)

    def test_validation(self):
        self.assertIsNone(bench.records.validate_record(not_measured("std")))
        self.assertIsNone(bench.records.validate_record(not_measured("std", "skipped", "not run")))
        self.assertIsNone(bench.records.validate_record(not_measured(
            "*", "skipped", "not run", workload="memory", params={}, metric="*")))
        r = not_measured("std")
        del r["reason"]
        self.assertIn("missing field(s): reason", bench.records.validate_record(r))
        self.assertIn("status", bench.records.validate_record(not_measured("std", status="slow")))
        self.assertIn("has no median", bench.records.validate_record(dict(not_measured("std"), median=1.0)))
        self.assertIn("variant", bench.records.validate_record(dict(not_measured("std"), variant="")))
        self.assertIsNone(bench.records.validate_record(rounds_rec("std", 100, 99, 1)))
        self.assertIn("hung_rounds", bench.records.validate_record(
            dict(rounds_rec("std", 100, 99, 1), hung_rounds=-1)))
        self.assertFalse(bench.records.is_measured(not_measured("std")))
        self.assertTrue(bench.records.is_measured(rec("std", 1.0)))

    def test_jsonl_keeps_status_records(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "s.jsonl"
            path.write_text(json.dumps(rec("spindle", 2.0)) + "\n"
                            + json.dumps(not_measured("boost_context")) + "\n")
            records, errors = bench.records.load_jsonl(path)
        self.assertEqual(errors, [])
        self.assertEqual([r.get("status") for r in records], [None, "hung"])

    def test_reference_and_ratio_skip_what_hung(self):
        records = [not_measured("spindle_fiber", reference=True), rec("spindle_thread", 2.0),
                   rec("std", 6.0, baseline="spindle_fiber")]
        self.assertEqual(bench.grouping.select_reference(records)["variant"], "spindle_thread")
        self.assertIsNone(bench.grouping.ratio_to_reference(records[0], records[1], False))
        self.assertIsNone(bench.grouping.ratio_to_reference(records[1], records[0], False))
        # A baseline that hung is not used: the reference is.
        self.assertIs(bench.grouping.select_baseline(records[2], records, records[1]), records[1])
        group = bench.grouping.group_records(records)[0]
        self.assertIn("std: baseline spindle_fiber was not measured; its ratio is against "
                      "the reference", group.warnings())

    def test_group_table(self):
        groups = bench.grouping.group_records([
            rec("spindle_thread", 2.0), rec("boost_context", 6.0),
            not_measured("std_counting_semaphore", reason="no result within 10 s (x)")])
        text = "\n".join(bench.report.render_group_table(groups[0]))
        self.assertIn("| spindle_thread | 2.00 | 1.80 | 2.20 | 5 | 1.00× (ref) |", text)
        self.assertIn("| boost_context | 6.00 | 5.40 | 6.60 | 5 | 3.00× |", text)
        self.assertIn("| std_counting_semaphore | hung | — | — | — | — |", text)
        self.assertIn("- ⚠ std_counting_semaphore hung: no result within 10 s (x)", text)

    def test_sweep_table(self):
        records = []
        for t in (2, 4, 8):
            kw = dict(self.SEM, params={"permits": 1, "threads": t})
            records += [rec("spindle_fiber", 8.0 * t, **kw), rec("spindle_thread", 4.0 * t, **kw),
                        rec("std_counting_semaphore", 2.0 * t, baseline="spindle_thread", **kw)]
        records[-1] = not_measured("std_counting_semaphore", baseline="spindle_thread",
                                   reason="no result within 10 s", **dict(
                                       self.SEM, params={"permits": 1, "threads": 8}))
        view = bench.grouping.workload_views(bench.grouping.group_records(records))[0]
        text = "\n".join(bench.report.render_view(view, None))
        self.assertIn("| 4 | 32.00 | 16.00 | 8.00 | 2.00× | 2.00× |", text)
        self.assertIn("| 8 | 64.00 | 32.00 | hung | 2.00× | — |", text)
        self.assertIn("- std_counting_semaphore (threads=8): ⚠ hung: no result within 10 s", text)

    def test_rounds_table(self):
        records = [rounds_rec("spindle_thread", 18000, 18000, 0),
                   rounds_rec("std_counting_semaphore", 18000, 17998, 2,
                              note="2 rounds hung: lost wake-up: the permit was free")]
        view = bench.grouping.workload_views(bench.grouping.group_records(records))[0]
        text = "\n".join(bench.report.render_view(view, "cqs_hang_freedom.png"))
        self.assertIn("| variant | rounds | finished | hung | round budget |", text)
        self.assertIn("| spindle_thread | 18,000 | 18,000 | 0 | 2,000 ms |", text)
        self.assertIn("| std_counting_semaphore | 18,000 | 17,998 | 2 | 2,000 ms |", text)
        self.assertIn("- std_counting_semaphore: 2 rounds hung: lost wake-up", text)
        self.assertNotIn("ratio", text)
        self.assertNotIn(".png", text)

    def test_workload_skipped_whole(self):
        view = bench.grouping.workload_views(bench.grouping.group_records([not_measured(
            "*", "skipped", "not run: the suite's time budget of 153 s was spent",
            suite="cqs", workload="memory", params={}, metric="*")]))[0]
        self.assertEqual(bench.report.render_view(view, None),
                         ["*Not run: not run: the suite's time budget of 153 s was spent*", ""])

    def test_hangs_section(self):
        self.assertEqual(bench.report.render_hangs([rec("spindle", 1.0)]), [])
        records = [rounds_rec("spindle_fiber", 500, 500, 0),
                   rounds_rec("std_counting_semaphore", 500, 499, 1),
                   rec("spindle_fiber", 8.0, **dict(self.SEM, params={"threads": 8})),
                   not_measured("std_counting_semaphore", reason="no result within 10 s",
                                **dict(self.SEM, params={"threads": 8})),
                   not_measured("spindle_fiber", "skipped", "not run", suite="cqs",
                                workload="pool", params={"pool_size": 1}),
                   not_measured("mutex_cv_queue", "skipped", "not run", suite="cqs",
                                workload="pool", params={"pool_size": 1}),
                   not_measured("*", "skipped", "not run", suite="cqs", workload="memory",
                                params={}, metric="*")]
        text = bench.report.render_report(records, {})
        self.assertIn("## Hangs", text)
        self.assertIn("| cqs | primitive=semaphore, actors=8 | std_counting_semaphore | 500 | 499 | 1 |",
                      text)
        self.assertIn("| cqs | semaphore | threads=8 | std_counting_semaphore | no result within 10 s |",
                      text)
        self.assertIn("- cqs: 1 comparisons (2 variant runs); workloads memory", text)
        self.assertLess(text.index("## Hangs"), text.index("## Suite `cqs`"))
        # Without hangs: the rounds, and a line saying so.
        text = "\n".join(bench.report.render_hangs(records[:3]))
        self.assertIn("No measurement hung.", text)
        self.assertNotIn("Skipped", text)

    def test_target_of_a_variant_that_hung(self):
        kw = dict(self.SEM, params={"permits": 1, "threads": 4})
        records = [rec("spindle_fiber", 3.0, **kw), not_measured("std_counting_semaphore", **kw)]
        contended = [r for r in bench.targets.check_targets(records)
                     if r.target.goal.startswith("semaphore, threads > permits")]
        self.assertEqual(len(contended), 1)
        self.assertIsNone(contended[0].met)
        self.assertEqual(contended[0].blocked, "std_counting_semaphore hung")
        text = "\n".join(bench.report.render_targets(contended))
        self.assertIn("| not measured (std_counting_semaphore hung) |", text)

    def test_a_point_that_hung_does_not_hide_a_miss(self):
        # growth_from_empty is a worst-of target: one point hung, one missed.
        def abort(q, **kw):
            return dict(suite="cqs", workload="abort", params={"queued": q, "waiter": "fiber"},
                        metric="growth_from_empty", **kw)
        records = [rec("spindle_simple", 1.0, **abort(0)),
                   not_measured("spindle_simple", **abort(1000)),
                   rec("spindle_simple", 1.9, **abort(100000))]
        growth = [r for r in bench.targets.check_targets(records)
                  if r.target.metric == "growth_from_empty" and r.target.variant == "spindle_simple"]
        self.assertEqual(len(growth), 1)
        self.assertIs(growth[0].met, False)
        self.assertEqual(growth[0].params["queued"], 100000)
        # Without the miss, the point that hung is what the target shows.
        growth = [r for r in bench.targets.check_targets(records[:2])
                  if r.target.metric == "growth_from_empty" and r.target.variant == "spindle_simple"]
        self.assertEqual(growth[0].blocked, "spindle_simple hung")

    def test_comparison_leaves_out_status_records(self):
        old = [rec("spindle", 2.0), not_measured("std")]
        new = [rec("spindle", 1.0), not_measured("std", "skipped", "not run")]
        text = "\n".join(bench.report.render_comparison(new, old, "old/results.json"))
        self.assertIn("1 records matched: 1 better, 0 worse", text)
        self.assertIn("0 only in this run, 0 only in the old one", text)

    @unittest.skipUnless(HAVE_MATPLOTLIB, "matplotlib is not installed for this python3")
    def test_plots_leave_out_status_and_rounds_records(self):
        records = [rec("spindle", 2.0), not_measured("boost_context"),
                   rounds_rec("std_latch", 10, 10, 0, primitive="latch")]
        with tempfile.TemporaryDirectory() as d:
            plots = bench.plots.make_plots(records, Path(d))
        self.assertEqual(sorted(plots.values()), ["switch_yield.png"])


class RunSuiteTest(unittest.TestCase):
    def test_a_program_that_ignores_sigterm_is_killed(self):
        with tempfile.TemporaryDirectory() as d:
            prog = Path(d) / "spindle_bench_deaf"
            write_program(prog, "trap '' TERM\nwhile :; do sleep 0.1; done\n")
            saved = bench.runner.KILL_GRACE_S
            bench.runner.KILL_GRACE_S = 0.5
            try:
                start = time.monotonic()
                code, timed_out = bench.runner.run_suite(prog, Path(d) / "out.jsonl", False, 1.0)
            finally:
                bench.runner.KILL_GRACE_S = saved
            self.assertTrue(timed_out)
            self.assertEqual(code, -9)  # SIGKILL, after SIGTERM was ignored
            # Bounded, not timed: a run that never ends would fail here.
            self.assertLess(time.monotonic() - start, 120)

    def test_what_is_left_of_the_group_is_killed_when_the_program_ends(self):
        with tempfile.TemporaryDirectory() as d:
            prog = Path(d) / "spindle_bench_leaves"
            pid_file = Path(d) / "child.pid"
            write_program(prog, f"""\
                sleep 1000 &
                echo $! > {pid_file}
                exit 0
                """)
            code, timed_out = bench.runner.run_suite(prog, Path(d) / "out.jsonl", False, 600.0)
            self.assertEqual((code, timed_out), (0, False))
            _assert_ends(self, int(pid_file.read_text()), "a child the program left behind")

    def test_a_program_killed_mid_record_is_not_malformed(self):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "x.jsonl"
            path.write_text(json.dumps(rec("spindle", 1.0)) + "\n" + '{"suite": "swi')
            records, errors = bench.records.load_jsonl(path, cut_short=True)
            self.assertEqual((len(records), errors), (1, []))
            records, errors = bench.records.load_jsonl(path)  # a program that ended by itself
            self.assertEqual(len(records), 1)
            self.assertIn("x.jsonl:2: not valid JSON", errors[0])


class DriverTest(unittest.TestCase):
    """bench.py run as a program on fake suite programs."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = Path(self._tmp.name)
        self.build = self.tmp / "build"
        self.out = self.tmp / "out"
        (self.build / "bench").mkdir(parents=True)
        (self.build / "build_info.json").write_text(json.dumps(
            {"compiler": "GNU 12.2.0", "build_type": "Release",
             "flags": "-O2", "sanitizer": ""}))
        self.fake_records = [rec("spindle", 2.0, suite="fake"),
                             rec("boost_context", 5.0, suite="fake",
                                 note="ring of 10 fibers")]
        # Two records, one echo each (the JSON holds no single quote).
        write_program(self.build / "bench" / "spindle_bench_fake",
                      'echo "fake: running yield ($MODE)" >&2\n'
                      ': > "$OUT"\n'
                      + "".join(f"echo '{json.dumps(r)}' >> \"$OUT\"\n"
                                for r in self.fake_records))

    def tearDown(self):
        self._tmp.cleanup()

    def run_bench(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(BENCH_PY), *args],
                              capture_output=True, text=True, timeout=120)

    def test_end_to_end(self):
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "fake")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("[1/1] suite fake ...", p.stdout)
        self.assertIn("fake: running yield (--quick)", p.stderr)  # stderr passed through
        results = json.loads((self.out / "results.json").read_text())
        self.assertEqual(results, self.fake_records)
        machine = json.loads((self.out / "machine.json").read_text())
        for key in ("cpu_model", "logical_cpus", "kernel", "date", "git_commit"):
            self.assertIn(key, machine)
        self.assertEqual(machine["build"]["compiler"], "GNU 12.2.0")
        self.assertEqual(machine["run"]["suites"][0]["exit_code"], 0)
        report = (self.out / "report.md").read_text()
        self.assertIn("## Suite `fake`", report)
        self.assertIn("| boost_context | 5.00 | 4.50 | 5.50 | 5 | 2.50× |", report)
        self.assertIn("- boost_context: ring of 10 fibers", report)
        self.assertIn("--suite fake", report)  # the command line
        if HAVE_MATPLOTLIB:
            self.assertIn("![fake yield: ns_per_op](fake_yield.png)", report)
            self.assertGreater((self.out / "fake_yield.png").stat().st_size, 0)

        # --full is passed on; --report-only rebuilds without running.
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "fake", "--full")
        self.assertIn("(--full)", p.stderr)
        (self.out / "report.md").unlink()
        if HAVE_MATPLOTLIB:
            (self.out / "fake_yield.png").unlink()
        p = self.run_bench("--out", str(self.out), "--report-only",
                           "--compare", str(self.out / "results.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("suite fake ...", p.stdout)
        report = (self.out / "report.md").read_text()
        self.assertIn("## Comparison with an earlier run", report)
        self.assertIn("Report rebuilt from results.json", report)
        if HAVE_MATPLOTLIB:
            self.assertTrue((self.out / "fake_yield.png").is_file())

    def test_failing_program(self):
        write_program(self.build / "bench" / "spindle_bench_broken", """\
            echo "broken: about to fail" >&2
            exit 3
            """)
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "broken,fake")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("[1/2] suite broken ...", p.stdout)
        self.assertIn("FAILED", p.stdout)
        self.assertIn("[2/2] suite fake ...", p.stdout)  # later suites still run
        report = (self.out / "report.md").read_text()
        self.assertIn("## Suite `fake`", report)
        self.assertIn("| broken | FAILED (exit status 3) |", report)

    def test_program_that_hangs_is_killed_and_the_run_goes_on(self):
        # The fake writes a record, starts a child that would outlive it,
        # and hangs; its budget is 2 s.
        pid_file = self.tmp / "child.pid"
        write_program(self.build / "bench" / "spindle_bench_stuck", f"""\
            echo '{json.dumps(rec("spindle", 1.0, suite="stuck"))}' > "$OUT"
            sleep 1000 &
            echo $! > {pid_file}
            echo "stuck: budget $BUDGET" >&2
            wait
            """)
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "stuck,fake", "--suite-budget", "2")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("stuck: budget 1.7", p.stderr)  # SOFT_BUDGET_FRACTION of 2 s
        self.assertIn("[1/2] suite stuck TIMED OUT: killed at its budget of 2 s (1 records kept)",
                      p.stdout)
        self.assertIn("[2/2] suite fake ...", p.stdout)  # the run went on
        self.assertIn("[2/2] suite fake done", p.stdout)
        # The hung program's child went with it (its process group).
        _assert_ends(self, int(pid_file.read_text()), "the program's child outlived the kill")
        results = json.loads((self.out / "results.json").read_text())
        self.assertEqual([r["suite"] for r in results], ["stuck", "fake", "fake"])
        machine = json.loads((self.out / "machine.json").read_text())
        stuck = machine["run"]["suites"][0]
        self.assertTrue(stuck["timed_out"])
        self.assertEqual(stuck["budget_s"], 2)
        self.assertEqual(stuck["last_workload"], "yield")
        self.assertEqual(machine["run"]["budget_s"], 4)
        report = (self.out / "report.md").read_text()
        self.assertIn("| stuck | TIMED OUT (killed at its budget of 2 s; workload yield was cut "
                      "short and what came after it did not run) |", report)
        self.assertIn("⚠ The suite's program was killed at its time budget", report)
        self.assertIn("## Suite `fake`", report)
        self.assertIn("The suites' budgets add up to 4 s; the suites took", report)

    def test_default_budgets_are_passed_on(self):
        write_program(self.build / "bench" / "spindle_bench_cqs", f"""\
            echo "cqs: budget $BUDGET hard $HARD" >&2
            echo '{json.dumps(rec("spindle", 1.0, suite="cqs"))}' > "$OUT"
            """)
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "cqs,fake")
        self.assertEqual(p.returncode, 0, p.stderr)
        soft = bench.runner.SUITE_BUDGET_S["cqs"] * bench.runner.SOFT_BUDGET_FRACTION
        self.assertIn(f"cqs: budget {soft:g} hard {bench.runner.SUITE_BUDGET_S['cqs']:g}", p.stderr)
        self.assertIn(f"suite cqs ... (budget {bench.runner.SUITE_BUDGET_S['cqs']} s)", p.stdout)
        self.assertIn(f"suite fake ... (budget {bench.runner.DEFAULT_SUITE_BUDGET_S} s)", p.stdout)
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "cqs", "--no-budget")
        self.assertIn("cqs: budget  hard \n", p.stderr)  # no --time-budget nor --hard-budget
        self.assertNotIn("(budget", p.stdout)

    def test_hung_variants_recorded_by_the_program(self):
        # What a program writes after its watchdog stopped a variant (see
        # bench/harness/harness.hpp): the run succeeds, the report shows it.
        sem = dict(suite="sem", workload="semaphore", params={"permits": 1, "threads": 8},
                   metric="ops_per_s", higher_is_better=True)
        lines = [rec("spindle_fiber", 2e6, **sem),
                 not_measured("std_counting_semaphore", baseline="spindle_fiber",
                              reason="no result within 10 s (its measurement 3 of 6)", **sem),
                 rounds_rec("std_counting_semaphore", 1000, 999, 1,
                            note="1 round hung: lost wake-up: the permit was free")]
        for r in lines:
            r["suite"] = "sem"
        write_program(self.build / "bench" / "spindle_bench_sem",
                      ': > "$OUT"\n' + "".join(f"echo '{json.dumps(r)}' >> \"$OUT\"\n"
                                               for r in lines))
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "sem")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("(3 records, 1 hung, 0 skipped)", p.stdout)
        results = json.loads((self.out / "results.json").read_text())
        self.assertEqual(results[1]["status"], "hung")
        report = (self.out / "report.md").read_text()
        self.assertIn("| sem | ok |", report)
        self.assertIn("| std_counting_semaphore | hung | — | — | — | — |", report)
        self.assertIn("| sem | semaphore | permits=1, threads=8 | std_counting_semaphore | "
                      "no result within 10 s (its measurement 3 of 6) |", report)
        self.assertIn("| sem | primitive=semaphore, actors=8 | std_counting_semaphore | "
                      "1,000 | 999 | 1 |", report)
        # --report-only reads them back from results.json.
        p = self.run_bench("--out", str(self.out), "--report-only")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("| std_counting_semaphore | hung |", (self.out / "report.md").read_text())

    def test_sigterm_kills_the_program_and_its_children(self):
        # The fake writes a record, starts a child, says where it is and
        # hangs; bench.py gets SIGTERM (then SIGHUP, in a second run).
        for sig in (signal.SIGTERM, signal.SIGHUP):
            with self.subTest(signal=sig.name):
                info = self.tmp / f"info.{sig.name}"
                write_program(self.build / "bench" / "spindle_bench_stuck", f"""\
                    echo '{json.dumps(rec("spindle", 1.0, suite="stuck"))}' > "$OUT"
                    sleep 1000 &
                    echo "$$ $! $OUT" > {info}.tmp
                    mv {info}.tmp {info}
                    wait
                    """)
                proc = subprocess.Popen([sys.executable, str(BENCH_PY), "--build-dir", str(self.build),
                                         "--out", str(self.out), "--suite", "stuck"],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    deadline = time.monotonic() + 60
                    while not info.exists() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    self.assertTrue(info.exists(), "the fake program did not start")
                    proc.send_signal(sig)
                    out, err = proc.communicate(timeout=120)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.communicate()
                self.assertEqual(proc.returncode, 128 + sig, err)
                self.assertIn(f"stopped by {sig.name}", err)
                program, child, out_file = info.read_text().split()
                _assert_ends(self, int(program), "the suite program")
                _assert_ends(self, int(child), "the suite program's child")
                self.assertFalse(Path(out_file).parent.exists(), "the temporary directory is left")

    def test_malformed_record_fails_run(self):
        write_program(self.build / "bench" / "spindle_bench_bad", f"""\
            echo '{json.dumps(rec("spindle", 1.0, suite="bad"))}' > "$OUT"
            echo '{{"suite": "bad"}}' >> "$OUT"
            """)
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "bad")
        self.assertEqual(p.returncode, 1)
        self.assertIn("bad.jsonl:2: missing field", p.stderr)
        self.assertEqual(len(json.loads((self.out / "results.json").read_text())), 1)

    def test_missing_program_is_an_error(self):
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out),
                           "--suite", "nope")
        self.assertEqual(p.returncode, 2)
        self.assertIn("spindle_bench_nope", p.stderr)
        self.assertIn("does not exist", p.stderr)
        self.assertFalse((self.out / "results.json").exists())

    def test_default_suites(self):
        # Only known suite names are run by default; none built -> error.
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out))
        self.assertEqual(p.returncode, 2)
        self.assertIn("no benchmark programs", p.stderr)
        write_program(self.build / "bench" / "spindle_bench_cqs", """\
            echo '{"suite": "cqs", "workload": "latch", "variant": "spindle", "params": {}, "metric": "ns_per_op", "higher_is_better": false, "median": 1, "min": 1, "max": 1, "reps": 1}' > "$OUT"
            """)
        write_program(self.build / "bench" / "spindle_bench_switch", """\
            echo '{"suite": "switch", "workload": "yield", "variant": "spindle", "params": {}, "metric": "ns_per_op", "higher_is_better": false, "median": 1, "min": 1, "max": 1, "reps": 1}' > "$OUT"
            """)
        p = self.run_bench("--build-dir", str(self.build), "--out", str(self.out))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("[1/2] suite switch ...", p.stdout)
        self.assertIn("[2/2] suite cqs ...", p.stdout)
        self.assertNotIn("suite fake", p.stdout)


def _build_dir() -> Path:
    """The build holding the benchmark programs: $SPINDLE_BENCH_BUILD_DIR,
    else build/release."""
    return Path(os.environ.get("SPINDLE_BENCH_BUILD_DIR") or REPO / "build" / "release")


def _program(suite: str) -> Path | None:
    prog = _build_dir() / "bench" / f"spindle_bench_{suite}"
    if os.access(prog, os.X_OK):
        return prog
    if os.environ.get("SPINDLE_BENCH_REQUIRE"):  # ctest: it must be there
        raise AssertionError(f"{prog} is not built")
    return None


def _cqs_program() -> Path | None:
    return _program("cqs")


def _leveldb_driver() -> bool:
    """Whether locks' LevelDB driver is built (it needs libleveldb-dev)."""
    return _program("locks") is not None and os.access(
        _build_dir() / "bench" / "spindle_leveldb_driver", os.X_OK)


def _io_program() -> Path | None:
    """spindle_bench_io, where it is built (it needs liburing-dev)."""
    prog = _build_dir() / "bench" / "spindle_bench_io"
    return prog if os.access(prog, os.X_OK) else None


# The real programs' tests never time what they wait for: a hang that is
# deliberate gets a short budget of its own (--test-hang-budget,
# --test-child-limit, --hf-round-ms), everything else the programs'
# defaults, which a slow machine stays well within.
@unittest.skipUnless(_cqs_program(), "spindle_bench_cqs is not built (cmake --preset release)")
class HarnessWatchdogTest(unittest.TestCase):
    """The C++ harness's watchdog and the hang-freedom workload, on the real
    programs with their test-only options (a measurement, a child process or
    a round that hangs on purpose)."""

    def run_prog(self, suite: str, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / f"{suite}.jsonl"
            p = subprocess.run([str(_program(suite)), "--out", str(out), *args],
                               capture_output=True, text=True, timeout=600)
            records, errors = bench.records.load_jsonl(out) if out.exists() else ([], ["no output"])
            self.assertEqual(errors, [], p.stderr)
            # No state file of a restart, no scratch directory.
            self.assertEqual(sorted(x.name for x in Path(d).iterdir()), [out.name], p.stderr)
        return p, records

    def run_cqs(self, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
        return self.run_prog("cqs", *args)

    def assert_one_hung(self, p: subprocess.CompletedProcess, records: list[dict], variant: str,
                        reason: str, status: str = "hung") -> None:
        """Every comparison of `records` measured its other variants and
        recorded `variant` with `status`, with `reason` in its reason."""
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(records, p.stderr)
        for r in records:
            if r["variant"] == variant:
                self.assertEqual(r.get("status"), status, r)
                self.assertIn(reason, r["reason"])
            else:
                self.assertNotIn("status", r)

    def test_a_measurement_that_hangs_is_recorded_and_the_run_goes_on(self):
        # The second measurement (the first after the warm-up) of the std
        # variant blocks forever, in each of the two comparisons: two
        # restarts, and both comparisons still measure spindle_fiber. Only
        # that measurement has a short budget.
        p, records = self.run_cqs(
            "--only", "semaphore", "--permits", "1", "--threads", "2,3", "--reps", "2",
            "--variants", "spindle_fiber,std_counting_semaphore", "--test-hang-budget", "2",
            "--test-hang", "std_counting_semaphore:2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.count("restarting the program to go on without it"), 2, p.stderr)
        self.assertEqual([(r["variant"], r["params"]["threads"], r.get("status")) for r in records],
                         [("spindle_fiber", 2, None), ("std_counting_semaphore", 2, "hung"),
                          ("spindle_fiber", 3, None), ("std_counting_semaphore", 3, "hung")])
        self.assertEqual(records[0]["reps"], 2)
        self.assertIn("no result within 2 s (its measurement 2 of 3 in this comparison",
                      records[1]["reason"])
        self.assertIn("std::counting_semaphore", records[1]["note"])
        self.assertEqual(records[1]["baseline"], "spindle_thread")
        # The restarted image ran the first one's work loop.
        self.assertEqual(p.stderr.count("work loop:"), 1, p.stderr)
        self.assertEqual(p.stderr.count("as measured before the restart"), 2, p.stderr)

    def test_a_child_that_hangs_is_killed_by_the_watchdog(self):
        # boost_fiber runs each measurement in a forked child (in_child):
        # the watchdog saves the state, kills the child and restarts; the
        # measuring thread that sees its child killed must not fail the run.
        p, records = self.run_cqs(
            "--only", "barrier", "--threads", "2,4", "--reps", "1",
            "--variants", "spindle_fiber,boost_fiber", "--test-hang-budget", "2",
            "--test-hang-child", "boost_fiber:2")
        self.assert_one_hung(p, records, "boost_fiber", "no result within 2 s")
        self.assertEqual([r["params"]["parties"] for r in records], [2, 2, 4, 4])

    def test_a_child_past_its_own_limit_makes_its_measurement_hung(self):
        # The same child, past the limit in_child gives it (SIGALRM):
        # measurement_hung, with the watchdog's budget left at its default.
        p, records = self.run_cqs(
            "--only", "barrier", "--threads", "2", "--reps", "1",
            "--variants", "spindle_fiber,boost_fiber", "--test-child-limit", "1",
            "--test-hang-child", "boost_fiber:2")
        self.assert_one_hung(p, records, "boost_fiber",
                             "boost_fiber: its child process did not finish within 1 s")
        self.assertEqual(len(records), 2)

    @unittest.skipUnless(_leveldb_driver(), "spindle_leveldb_driver is not built (libleveldb-dev)")
    def test_a_leveldb_driver_that_hangs(self):
        # locks' driver process (run_driver), stopped by the watchdog and by
        # its own limit; the database directory, beside --out, is removed
        # both times (run_prog checks).
        common = ("--only", "leveldb", "--leveldb-threads", "1", "--leveldb-seconds", "0.05",
                  "--reps", "1", "--preload", "/nonexistent", "--test-hang-child", "glibc:2")
        p, records = self.run_prog("locks", *common, "--test-hang-budget", "2")
        self.assert_one_hung(p, records, "glibc", "no result within 2 s")
        p, records = self.run_prog("locks", *common, "--test-child-limit", "1")
        self.assert_one_hung(p, records, "glibc", "did not finish within 1 s")

    def test_the_watch_ends_before_the_hard_budget(self):
        # The hung measurement's own budget (600 s) is cut to what is left
        # before --hard-budget 20 less the restart's margin (5 s): stopped
        # for want of time, it is recorded as skipped, not hung. The
        # restarted image is past --time-budget 14 and skips the rest.
        # Nothing here is timed: the cut comes whenever the hang starts.
        p, records = self.run_cqs(
            "--only", "semaphore", "--permits", "1", "--threads", "2", "--reps", "1",
            "--variants", "spindle_fiber,std_counting_semaphore", "--hard-budget", "20",
            "--time-budget", "14", "--test-hang-budget", "600",
            "--test-hang", "std_counting_semaphore:2")
        self.assertEqual(p.returncode, 0, p.stderr)
        std = [r for r in records if r["variant"] == "std_counting_semaphore"]
        self.assertEqual(len(std), 1, records)
        self.assertEqual(std[0].get("status"), "skipped", std)
        self.assertIn("all that the suite's --hard-budget left it; it may or may not have hung",
                      std[0]["reason"])
        self.assertNotIn("hung", [r.get("status") for r in records])

    def test_records_derived_from_a_variant_that_hung(self):
        # abort's growth and speed-up records are computed from its
        # comparison: those that need linear_removal say it hung.
        p, records = self.run_cqs(
            "--only", "abort", "--queued", "10", "--abort-waiter", "fiber", "--reps", "1",
            "--variants", "spindle_smart,linear_removal", "--test-hang-budget", "2",
            "--test-hang", "linear_removal:2")
        self.assertEqual(p.returncode, 0, p.stderr)
        derived = {(r["variant"], r["metric"]): r for r in records if r["metric"] != "ns_per_op"}
        self.assertNotIn("status", derived[("spindle_smart", "growth_from_empty")])
        for key in (("linear_removal", "growth_from_empty"),
                    ("spindle_smart", "speedup_vs_linear_removal")):
            self.assertEqual(derived[key]["status"], "hung", derived)
            self.assertIn("not computed: it derives from linear_removal, which hung",
                          derived[key]["reason"])

    def test_resume_file_errors(self):
        cqs = ("--only", "semaphore", "--threads", "1", "--permits", "1", "--variants", "spindle_fiber")
        with tempfile.TemporaryDirectory() as d:
            out = str(Path(d) / "cqs.jsonl")
            # Missing.
            p = subprocess.run([str(_cqs_program()), "--out", out, *cqs, "--resume",
                                str(Path(d) / "nope")], capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("cannot resume: cannot read", p.stderr)
            # Not one; removed.
            bad = Path(d) / "bad.resume"
            bad.write_text("spindle-bench-resume 1\nat 0\n")
            p = subprocess.run([str(_cqs_program()), "--out", out, *cqs, "--resume", str(bad)],
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("cannot resume: not a resume file", p.stderr)
            self.assertFalse(bad.exists())
            # Of another comparison (a program that changed between the
            # images): stopped at the replay, not measured as another one.
            other = Path(d) / "other.resume"
            other.write_text(f"spindle-bench-resume 2\nstart_ns {time.monotonic_ns()}\n"
                             "cal spin_ns 0.5\nat 0\nkey semaphore [permits=9] ops_per_s: some one\n"
                             "h hung some one\nr it hung: badly\n")
            p = subprocess.run([str(_cqs_program()), "--out", out, *cqs, "--resume", str(other)],
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("spin_ns = 0.5, as measured before the restart", p.stderr)
            self.assertIn("'semaphore [permits=9] ops_per_s: some one' in the saved run: the program "
                          "did not call compare() in the same order", p.stderr)
            self.assertFalse(other.exists())

    def test_time_budget_skips_what_is_left(self):
        # Spent before the workload starts: one record for the whole workload.
        p, records = self.run_cqs("--only", "semaphore", "--threads", "1", "--permits", "1,2",
                                  "--variants", "spindle_fiber", "--time-budget", "0.001")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([(r["workload"], r["variant"], r["status"]) for r in records],
                         [("semaphore", "*", "skipped")])
        self.assertIn("time budget of 0.001 s was spent", records[0]["reason"])
        # Spent during it: what is left is skipped comparison by comparison
        # (five of at least 60 ms each; how many fit depends on the machine).
        p, records = self.run_cqs("--only", "semaphore", "--threads", "1",
                                  "--permits", "1,2,3,4,5", "--variants", "spindle_fiber",
                                  "--reps", "1", "--time-budget", "0.2")
        self.assertEqual(p.returncode, 0, p.stderr)
        statuses = [r.get("status") for r in records]
        self.assertEqual(statuses[-1], "skipped", statuses)
        first = statuses.index("skipped")
        self.assertEqual(statuses[first:], ["skipped"] * (len(statuses) - first), statuses)

    def hf_records(self, *args: str) -> list[dict]:
        """hang_freedom's records; every rounds record adds up."""
        p, records = self.run_cqs("--only", "hang_freedom", *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        for r in records:
            if "status" not in r:
                self.assertEqual(r["median"] + r["hung_rounds"], r["reps"], r)
        return records

    def test_a_hang_freedom_round_that_stalls(self):
        # One actor of spindle_thread blocks forever (outside the primitive)
        # in round 5 of its only batch: that round hangs, the rest go on in
        # a new child, and the round is not called a lost wake-up. The
        # primitives' time is ample: the batch always finishes.
        records = self.hf_records("--variants", "spindle_thread", "--hf-rounds", "500",
                                  "--hf-seconds", "600", "--hf-round-ms", "1000",
                                  "--hf-test-stall", "spindle_thread:5")
        self.assertEqual([r["params"]["primitive"] for r in records],
                         ["semaphore", "latch", "barrier"])
        for r in records:
            self.assertEqual((r["variant"], r["reps"]), ("spindle_thread", 500), r)
            self.assertGreaterEqual(r["hung_rounds"], 1, r)
            self.assertRegex(r["note"], r"\d+ rounds? hung: no progress within the round's budget")
            self.assertNotIn("lost wake-up", r["note"])

    def test_hang_freedom_calls_a_lost_wake_up_one(self):
        # One actor's call sleeps for good where the primitive's state says
        # it should have returned: a free permit, an open latch, a completed
        # barrier phase -- on threads and on fibers.
        for variant in ("spindle_thread", "spindle_fiber"):
            with self.subTest(variant=variant):
                records = self.hf_records("--variants", variant, "--hf-rounds", "500",
                                          "--hf-seconds", "600", "--hf-round-ms", "1000",
                                          "--hf-test-lose", f"{variant}:5")
                self.assertEqual([r["params"]["primitive"] for r in records],
                                 ["semaphore", "latch", "barrier"])
                for r in records:
                    self.assertGreaterEqual(r["hung_rounds"], 1, r)
                    self.assertIn("round hung: lost wake-up: the " + {
                        "semaphore": "permit was free", "latch": "round's latch was open",
                        "barrier": "barrier had completed the phase"}[r["params"]["primitive"]],
                                  r["note"])

    def test_a_hang_freedom_child_that_stops(self):
        # The whole child stops (SIGSTOP) in round 7: nothing reports and
        # nothing moves, so the parent kills it after the round's budget
        # plus its margin and counts the rounds it had finished.
        records = self.hf_records("--variants", "std_latch", "--hf-rounds", "500",
                                  "--hf-seconds", "600", "--hf-round-ms", "500",
                                  "--hf-test-freeze", "std_latch:7")
        self.assertEqual(len(records), 1)
        r = records[0]
        self.assertEqual(r["reps"], 500, r)
        self.assertGreaterEqual(r["hung_rounds"], 1, r)
        self.assertRegex(r["note"], r"round hung: its child process made no progress and sent "
                                    r"no word for \d+ s \(killed\)")

    def test_hang_freedom_variants_not_reached_are_skipped(self):
        # The stall takes the round's budget, 1.5 s, which is more than the
        # latch's 1 s: spindle_thread's round hangs past the deadline and
        # std_latch, after it in the plan, never runs.
        records = self.hf_records("--variants", "spindle_thread,std_latch", "--hf-rounds", "500",
                                  "--hf-seconds", "1", "--hf-round-ms", "1500",
                                  "--hf-test-stall", "spindle_thread:5")
        latch = {r["variant"]: r for r in records if r["params"]["primitive"] == "latch"}
        self.assertGreaterEqual(latch["spindle_thread"]["hung_rounds"], 1)
        self.assertEqual(latch["std_latch"]["status"], "skipped", latch)
        self.assertIn("the latch's 1 s were spent before its first round", latch["std_latch"]["reason"])
        self.assertNotIn("reps", latch["std_latch"])

    def test_hang_freedom_keeps_to_the_time_budget(self):
        # --time-budget ends the semaphore's rounds early; the latch and
        # the barrier are skipped.
        p, records = self.run_cqs("--only", "hang_freedom", "--variants", "spindle_thread",
                                  "--hf-seconds", "600", "--time-budget", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([r["params"]["primitive"] for r in records], ["semaphore", "latch", "barrier"])
        for r in records[1:]:
            self.assertEqual(r["status"], "skipped", r)
            self.assertIn("time budget of 2 s was spent", r["reason"])


# Nothing here is timed: the windows are short because only what the
# records say is checked, not how fast anything was.
@unittest.skipUnless(_io_program(), "spindle_bench_io is not built (cmake --preset release, liburing-dev)")
class IoSuiteTest(unittest.TestCase):
    """The io suite program on the real servers, with short windows: the
    records it writes, and what it does with a server that cannot run."""

    QUICK = ("--reps", "1", "--seconds", "0.1", "--warmup", "0.05")

    def run_io(self, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "io.jsonl"
            p = subprocess.run([str(_io_program()), "--out", str(out), *args],
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            records, errors = bench.records.load_jsonl(out)
            self.assertEqual(errors, [], p.stderr)
            self.assertEqual(sorted(x.name for x in Path(d).iterdir()), [out.name], p.stderr)
        return p, records

    @staticmethod
    def by(records: list[dict], variant: str, metric: str) -> list[dict]:
        return [r for r in records if r["variant"] == variant and r["metric"] == metric]

    def test_pingpong_records(self):
        p, records = self.run_io("--only", "pingpong_64b", "--conns", "2", *self.QUICK, "--variants",
                                 "c_uring,c_epoll,spindle_epoll,thread_per_connection")
        metrics = ("rtt_per_s", "server_cpu_us_per_rtt", "latency_p50_us", "latency_p99_us",
                   "latency_p999_us", "generator_cpu_share")
        for v in ("c_uring", "c_epoll", "thread_per_connection"):
            for m in metrics:
                (r,) = self.by(records, v, m)
                self.assertNotIn("status", r, p.stderr)
                self.assertEqual(r["params"], {"conns": 2, "size": 64, "workers": 1})
                self.assertEqual(r["reps"], 1)
                self.assertGreater(r["median"], 0, r)
                self.assertEqual(r.get("reference", False), v == "c_uring", r)
            p50, p99, p999 = (self.by(records, v, m)[0]["median"]
                              for m in ("latency_p50_us", "latency_p99_us", "latency_p999_us"))
            self.assertLessEqual(p50, p99)
            self.assertLessEqual(p99, p999)
        # spindle's server: measured against c_epoll, or skipped saying why.
        for m in metrics:
            (r,) = self.by(records, "spindle_epoll", m)
            if "status" in r:
                self.assertEqual(r["status"], "skipped")
                self.assertIn("spindle_io_server", r["reason"])
            else:
                self.assertEqual(r.get("baseline"), "c_epoll", r)
        # The one competitor measured is the best one in its only round.
        (best,) = self.by(records, "best_competitor", "latency_p50_us")
        (tpc,) = self.by(records, "thread_per_connection", "latency_p50_us")
        self.assertEqual(best["samples"], tpc["samples"])
        self.assertIn("thread_per_connection 1", best["note"])

    def test_a_server_that_cannot_run_is_skipped_with_its_reason(self):
        with tempfile.TemporaryDirectory() as d:
            built = _io_program().parent
            for name in ("io_loadgen", "io_c_uring_server"):
                os.symlink(built / name, Path(d) / name)
            write_program(Path(d) / "io_c_epoll_server", "echo 'no port for me' >&2; exit 3\n")
            p, records = self.run_io("--only", "pingpong_64b", "--conns", "1", *self.QUICK,
                                     "--variants", "c_uring,c_epoll,asio", "--server-dir", d)
        self.assertTrue(self.by(records, "c_uring", "rtt_per_s"), p.stderr)
        for r in records:
            if r["variant"] == "c_uring":
                self.assertNotIn("status", r)
            elif r["variant"] == "c_epoll":
                self.assertEqual(r["status"], "skipped")
                self.assertIn("exited with status 3 before accepting", r["reason"])
                self.assertIn("no port for me", r["reason"])
            else:
                self.assertEqual(r["variant"], "asio")
                self.assertEqual(r["status"], "skipped")
                self.assertIn("not built", r["reason"])
        self.assertEqual(len(self.by(records, "c_epoll", "latency_p999_us")), 1)

    def test_an_echo_that_differs_makes_its_variant_hung(self):
        # A server that answers every message with as many wrong bytes: the
        # generator ends at the first reply, the measurement is recorded as
        # hung with the generator's words, and the run goes on without it.
        with tempfile.TemporaryDirectory() as d:
            built = _io_program().parent
            for name in ("io_loadgen", "io_c_uring_server"):
                os.symlink(built / name, Path(d) / name)
            bad = Path(d) / "io_c_epoll_server"
            bad.write_text(textwrap.dedent("""\
                #!/bin/sh
                exec python3 -c '
                import socket, sys
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", int(sys.argv[1])))
                s.listen(64)
                while True:
                    c, _ = s.accept()
                    while True:
                        d = c.recv(65536)
                        if not d:
                            break
                        c.sendall(b"z" * len(d))
                    c.close()
                ' "$@"
                """))
            bad.chmod(0o755)
            p, records = self.run_io("--only", "pingpong_64b", "--conns", "1", *self.QUICK,
                                     "--variants", "c_uring,c_epoll", "--server-dir", d)
        (r,) = self.by(records, "c_epoll", "rtt_per_s")
        self.assertEqual(r.get("status"), "hung", p.stderr)
        self.assertIn("the echo differs from the message sent", r["reason"])
        self.assertNotIn("status", self.by(records, "c_uring", "rtt_per_s")[0])

    def test_idle(self):
        p, records = self.run_io("--only", "idle", "--idle-conns", "200", "--idle-seconds", "0.2",
                                 "--variants", "c_uring,c_epoll")
        for v in ("c_uring", "c_epoll"):
            (rss,) = self.by(records, v, "rss_kib_per_conn")
            (cpu,) = self.by(records, v, "idle_cpu_pct")
            self.assertEqual(rss["params"], {"conns": 200})
            self.assertGreaterEqual(cpu["median"], 0)
            self.assertLess(cpu["median"], 100.5)
        # c_uring's 16 KiB buffer per connection: the one recv into it
        # touched at least a page of it each.
        self.assertGreater(self.by(records, "c_uring", "rss_kib_per_conn")[0]["median"], 3.5)

    def test_syscalls(self):
        p, records = self.run_io("--only", "syscalls", "--variants", "c_uring,c_epoll")
        epoll = self.by(records, "c_epoll", "syscalls_per_rtt")[0]
        uring = self.by(records, "c_uring", "syscalls_per_rtt")[0]
        if "status" in epoll:
            self.skipTest(f"not measured: {epoll['reason']}")  # no strace, or no ptrace here
        # c_epoll: a recv and a send per round trip, epoll_wait shared by
        # the connections ready together; c_uring: one io_uring_enter per
        # batch of completions.
        self.assertGreaterEqual(epoll["median"], 2.0)
        self.assertLess(epoll["median"], 3.0)
        self.assertLess(uring["median"], 1.0)


def _kv_program() -> Path | None:
    """spindle_bench_kv, where it is built."""
    prog = _build_dir() / "bench" / "spindle_bench_kv"
    return prog if os.access(prog, os.X_OK) else None


def _memaslap() -> str | None:
    return next((p for p in ("/usr/bin/memcaslap", "/usr/bin/memaslap") if os.access(p, os.X_OK)), None)


# What memaslap -S 1s prints for a 2-second run (cut down: two periods, and
# the Get and Set blocks that the parser must not count as the Total one).
MEMASLAP_OUTPUT = """\
servers: 127.0.0.1:40000
threads count: 1
concurrency: 64
run time: 2s
windows size: 10k
set proportion: set_prop=0.10
get proportion: get_prop=0.90
\x1b[1;1H\x1b[2J
Get Statistics
Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist
Period   1        900          900          1.0        0          20       900        200        10.00      190.00
Global   1        900          900          1.0        0          20       900        200        10.00      190.00

Total Statistics
Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist
Period   1        1000         1000         1.0        0          20       900        200        10.00      190.00
Global   1        1000         1000         1.0        0          20       900        200        10.00      190.00

\x1b[1;1H\x1b[2J
Get Statistics
Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist
Period   1        2700         2700         1.0        0          20       900        200        10.00      190.00
Global   2        3600         1800         1.0        0          20       900        200        10.00      190.00

Set Statistics
Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist
Period   1        300          300          1.0        0          20       900        200        10.00      190.00
Global   2        400          200          1.0        0          20       900        200        10.00      190.00

Total Statistics
Type     Time(s)  Ops          TPS(ops/s)   Net(M/s)   Get_miss   Min(us)  Max(us)    Avg(us)    Std_dev    Geo_dist
Period   1        3000         3000         1.0        0          20       900        200        10.00      190.00
Global   2        4000         2000         1.0        0          20       900        200        10.00      190.00

Get Statistics (3600 events)
   Min:        20
   Max:       900
   Avg:       200
   Geo:    190.00
   Std:     10.00
   Log2 Dist:
       4:        0        0        0     3600

Total Statistics (4000 events)
   Min:        20
   Max:       900
   Avg:       200
   Geo:    190.00
   Std:     10.00
   Log2 Dist:
       4:        0        0        0      100
       8:     3000      860       40

cmd_get: 3600
cmd_set: 400
get_misses: 36
written_bytes: 1000
read_bytes: 1000
object_bytes: 1000

Run time: 2.0s Ops: 4000 TPS: 2000 Net_rate: 1.0M/s
"""


@unittest.skipUnless(_kv_program(), "spindle_bench_kv is not built (cmake --preset release)")
class KvSuiteTest(unittest.TestCase):
    """The kv suite program: its reading of memaslap's output, and, where
    memcached and memaslap are installed, the records it writes with
    memcached standing in for spindle-kv."""

    def parse(self, text: str) -> dict:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "memaslap.txt"
            path.write_text(text, encoding="utf-8")
            p = subprocess.run([str(_kv_program()), "--parse-memaslap", str(path)],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return {k: float(v) for k, v in (w.split("=") for w in p.stdout.split())}

    def test_memaslap_parser(self):
        got = self.parse(MEMASLAP_OUTPUT)
        self.assertEqual(got["periods"], 2)
        self.assertEqual(got["window_ops"], 3000)  # the Total rows after the first
        self.assertEqual(got["events"], 4000)
        self.assertEqual((got["min_us"], got["max_us"]), (20, 900))
        self.assertEqual((got["cmd_get"], got["get_misses"]), (3600, 36))
        self.assertEqual(got["finished"], 1)
        # The Total histogram: bucket i holds (2^(i-1), 2^i] us. The median
        # (rank 2000) is in bucket 8 after 100 below it: 128 + 128 * 1900/3000;
        # the 99th percentile (rank 3960) ends bucket 9 exactly: 512.
        self.assertAlmostEqual(got["p50_us"], 128 + 128 * 1900 / 3000, places=2)
        self.assertAlmostEqual(got["p99_us"], 512, places=2)

    def test_memaslap_parser_clamps_and_cut_short(self):
        # A percentile in the top bucket is clamped to memaslap's max; an
        # output without "Run time:" (memaslap killed) is not finished.
        text = MEMASLAP_OUTPUT.replace("   Max:       900", "   Max:       700")
        text = text.replace("       8:     3000      860       40", "       8:        0        0     3900")
        got = self.parse(text.split("Run time:")[0])
        self.assertEqual(got["finished"], 0)
        self.assertLessEqual(got["p99_us"], 700)
        self.assertGreater(got["p99_us"], 512)

    def run_kv(self, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "kv.jsonl"
            p = subprocess.run([str(_kv_program()), "--out", str(out), *args],
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            records, errors = bench.records.load_jsonl(out)
            self.assertEqual(errors, [], p.stderr)
        return p, records

    @staticmethod
    def by(records: list[dict], variant: str, metric: str) -> list[dict]:
        return [r for r in records if r["variant"] == variant and r["metric"] == metric]

    def stand_in(self, d: str) -> str:
        """A spindle-kv that is memcached (as root it needs -u root)."""
        path = Path(d) / "spindle-kv"
        user = " -u root" if os.geteuid() == 0 else ""
        path.write_text(f'#!/bin/sh\nexec /usr/bin/memcached{user} "$@"\n')
        path.chmod(0o755)
        return str(path)

    @unittest.skipUnless(os.access("/usr/bin/memcached", os.X_OK) and _memaslap(),
                         "memcached or memaslap is not installed (scripts/deps.sh bench)")
    def test_mix_records_with_memcached_standing_in(self):
        with tempfile.TemporaryDirectory() as d:
            p, records = self.run_kv("--only", "get90_64b", "--reps", "1", "--seconds", "1",
                                     "--variants", "memcached,spindle_kv", "--spindle-kv", self.stand_in(d))
        for v in ("memcached", "spindle_kv"):
            for m in ("ops_per_s", "latency_p50_us", "latency_p99_us", "latency_avg_us",
                      "server_cpu_us_per_op", "client_cpu_share", "get_miss_pct"):
                (r,) = self.by(records, v, m)
                self.assertNotIn("status", r, p.stderr)
                self.assertEqual(r["params"], {"conns": 64, "size": 64, "workers": 1})
                self.assertEqual(r["reps"], 1)
                self.assertEqual(r.get("reference", False), v == "memcached", r)
            self.assertGreater(self.by(records, v, "ops_per_s")[0]["median"], 0)
            p50, p99 = (self.by(records, v, m)[0]["median"] for m in ("latency_p50_us", "latency_p99_us"))
            self.assertGreater(p50, 0)
            self.assertLessEqual(p50, p99)
            share = self.by(records, v, "client_cpu_share")[0]["median"]
            self.assertGreater(share, 0)
            self.assertLess(share, 1.1)
            # memaslap gets only the keys it has set, and 1 GiB holds them.
            self.assertEqual(self.by(records, v, "get_miss_pct")[0]["median"], 0)
        self.assertNotIn("memcached_preload_hemlock_park", {r["variant"] for r in records})

    def test_a_server_that_cannot_start_is_skipped_with_its_reason(self):
        with tempfile.TemporaryDirectory() as d:
            bad = Path(d) / "memcached"
            bad.write_text("#!/bin/sh\necho 'no cache for me' >&2\nexit 3\n")
            bad.chmod(0o755)
            p, records = self.run_kv("--only", "idle", "--idle-conns", "10", "--variants", "memcached",
                                     "--memcached", str(bad))
        (r,) = self.by(records, "memcached", "rss_kib_per_conn")
        self.assertEqual(r["status"], "skipped", p.stderr)
        self.assertIn("exited with status 3 before accepting", r["reason"])
        self.assertIn("no cache for me", r["reason"])

    @unittest.skipUnless(os.access("/usr/bin/memcached", os.X_OK), "memcached is not installed")
    def test_idle_and_a_missing_spindle_kv(self):
        p, records = self.run_kv("--only", "idle", "--idle-conns", "200", "--variants",
                                 "memcached,spindle_kv", "--spindle-kv", "/nonexistent/spindle-kv")
        (rss,) = self.by(records, "memcached", "rss_kib_per_conn")
        self.assertEqual(rss["params"], {"conns": 200})
        self.assertGreater(rss["median"], 0)  # memcached's conn structure, at least
        self.assertTrue(rss.get("reference"))
        (kv,) = self.by(records, "spindle_kv", "rss_kib_per_conn")
        self.assertEqual(kv["status"], "skipped")
        self.assertIn("not built: no /nonexistent/spindle-kv", kv["reason"])

if __name__ == "__main__":
    unittest.main()
