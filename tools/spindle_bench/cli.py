"""The command line of tools/bench.py: run the suites (or read a stored
run), then write results.json, machine.json, report.md and the plots."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from .diagnostics import warn
from .formatting import fmt_num, fmt_params
from .plots import make_plots
from .records import load_results_json
from .report import render_report
from .runner import (FULL_SUITE_BUDGET_S, KNOWN_SUITES, SUITE_BUDGET_S, choose_suites,
                     machine_info, run_suites)
from .targets import check_targets


EXIT_OK = 0
EXIT_FAILED = 1  # a suite failed or a record was malformed; report written
EXIT_USAGE = 2  # nothing could be run or read


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
    # see runner._kill_group), then bench.py exits 128 + the signal, with no report.
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
