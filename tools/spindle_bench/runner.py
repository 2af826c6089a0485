"""Runs the suite programs within their time budgets (see the package's
"Hangs and budgets") and describes the machine they ran on."""

from __future__ import annotations

import datetime
import json
import os
import platform
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from .diagnostics import warn
from .records import load_jsonl


# Suites in the order they run by default; a suite is included by default only
# when its program exists in the build directory.
KNOWN_SUITES = ("switch", "ces", "cqs", "locks", "io", "kv")
PROGRAM_PREFIX = "spindle_bench_"

# The repository (this file is tools/spindle_bench/runner.py): its HEAD
# commit goes into machine.json.
REPO = Path(__file__).resolve().parent.parent.parent


# Time budget of each suite of the quick run, in seconds (see "Hangs and
# budgets" in the package's manual, __init__.py). Quick runs on the
# project's 2-CPU machine took switch 5-9 s, ces 41-180 s (180 at a load
# average near 200), cqs 49-52 s (75 s with hang_freedom, under that load),
# locks 113-135 s, io 94 s with seven of its nine servers built (137 s
# with all nine) and kv about 60 s: each budget is well above the
# slowest, so that a slow, shared machine still finishes, and a hang
# costs at most the budget. Their sum, 20 minutes, bounds a quick run
# (docs/benchmarks.md, "How make bench runs").
SUITE_BUDGET_S = {"switch": 60, "ces": 300, "cqs": 180, "locks": 240, "io": 240, "kv": 180}
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
        "git_commit": git_commit(REPO),
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
