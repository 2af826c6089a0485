"""Run spindle's benchmark programs and turn their records into a report.

Usage (from the repository root)::

    /usr/bin/python3 tools/bench.py --build-dir build/release \\
        --out bench/results/latest [--suite switch[,ces,...]] [--full] \\
        [--suite-budget SECONDS | --no-budget] \\
        [--compare OLD/results.json] [--report-only]

``tools/bench.py`` is the entry point; this package does the work:

* ``cli.py``: the command line, and the order of the steps below;
* ``runner.py``: runs the suite programs within their budgets (the
  constants of "Hangs and budgets": SUITE_BUDGET_S and the rest) and
  describes the machine (machine.json);
* ``records.py``: the records' fields, validation and loading;
* ``grouping.py``: comparison groups, references, ratios and sweeps;
* ``formatting.py``: numbers, units, parameters, Markdown tables;
* ``report.py``: report.md, its "Targets" and "Hangs" sections and the
  comparison with an older run;
* ``targets.py``: the project's goals per benchmark (the data file
  ``targets.toml``), checked against a run;
* ``plots.py``: the PNG plots (PLOT_BUDGET_S);
* ``diagnostics.py``: warnings on stderr.

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
   and its budget), the targets the project's issues set (targets.toml:
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
