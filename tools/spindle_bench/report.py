"""report.md: the header, the targets, the hangs, a table per comparison
group or sweep, and the comparison with an older run."""

from __future__ import annotations

from typing import Sequence

from .formatting import (describe_metric, fmt_num, fmt_param_value, fmt_params, fmt_ratio,
                         md_escape, md_table, metric_unit)
from .grouping import (Facet, Group, Sweep, WorkloadView, canonical_params, find_sweep,
                       group_records, ratio_to_reference, select_baseline, workload_views)
from .records import is_measured, is_rounds_record
from .targets import TargetResult, check_targets


# In --compare, a median change smaller than this (in percent) is called "≈".
COMPARE_NOISE_PCT = 2.0

# In --compare, at most this many unmatched records are listed one by one.
COMPARE_MAX_LISTED = 20


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
