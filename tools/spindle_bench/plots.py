"""The PNG plots: a line plot per sweep, bar charts otherwise (matplotlib,
Agg backend)."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Sequence

from .diagnostics import warn
from .formatting import describe_metric, fmt_num, fmt_params, metric_unit, plot_file_name
from .grouping import Sweep, WorkloadView, find_sweep, group_records, workload_views
from .records import is_measured, is_rounds_record


# The plots: none is started past this many seconds after the first (the
# report then links only those drawn), so that drawing them cannot hold
# the run up for long on a slow machine.
PLOT_BUDGET_S = 40

# An axis is drawn logarithmic when its values span more than this factor.
LOG_SCALE_SPAN = 100.0


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
