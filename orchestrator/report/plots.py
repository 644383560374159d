"""Matplotlib figures: success vs k, vs student size and vs cost; steps against the teacher."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from distillery.orchestrator.report.load import cell_keys
from distillery.orchestrator.report.tables import _display, disambiguators, distinguishing
from distillery.orchestrator.state.sweep_tables import MethodColumns


def _figure(ncols: int = 1, width: float = 6.0, height: float = 4.2) -> Any:
    # An explicit Figure with the Agg canvas: no pyplot global state, no display needed,
    # and no backend switch imposed on a process that imports this module.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _legend(ax: Any, title: str | None = None) -> None:
    """A legend beside the axes (never over the data), in a readable size."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(
            fontsize=8, title=title, title_fontsize=8, loc="upper left",
            bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False,
        )  # fmt: skip


def _rate_axis(ax: Any) -> None:
    """A success rate's whole range: 0 to 100 %, so a gap looks as large as it is."""
    ax.set_ylim(0, 105)  # a little room above 100 % for markers and labels
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("success rate (%)")


def _varying(frame: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    return [k for k in keys if k in frame.columns and frame[k].nunique() > 1]


def _label_keys(
    lines: pd.DataFrame, columns: MethodColumns | None, exclude: Sequence[str] = ()
) -> list[str]:
    """Short legend keys: the method, then only what tells lines of one method apart."""
    candidates = [k for k in ("student", *disambiguators(columns)) if k not in exclude]
    return distinguishing(lines, ["method"], candidates)


def _line_label(row: Any, keys: Sequence[str]) -> str:
    parts = []
    for k in keys:
        value = str(row[k])
        if k in ("method", "student", "memory_types"):
            parts.append(_display(k, value))
        elif value:  # a memory setting's "–" on a zero-shot line says nothing
            parts.append(f"{k}={value}")
    return ", ".join(parts)


def _errorbars(cells: pd.DataFrame) -> np.ndarray:
    return 100 * np.vstack(
        [
            (cells["rate"] - cells["ci_low"]).clip(lower=0),
            (cells["ci_high"] - cells["rate"]).clip(lower=0),
        ]
    )


def plot_success_vs_k(
    cells: pd.DataFrame, path: Path, columns: MethodColumns | None = None
) -> str | None:
    """Success vs k, one panel per number-of-entries column of the sweep's memory
    methods (`columns.depth`, e.g. one per collection) that varies, one line per setting
    of everything else. Returns a note when there is nothing to plot."""
    columns = columns or MethodColumns()
    keys = cell_keys(columns)
    students = cells[(cells["role"] == "student") & cells["n"].gt(0)]
    panels = []
    for column in columns.depth:
        data = students[students[column] != ""]
        if data[column].nunique() < 2:
            continue
        group_keys = [k for k in keys if k != column]
        lines = [g for _, g in data.groupby(group_keys, sort=False) if g[column].nunique() > 1]
        if lines:
            panels.append((column, lines))
    if not panels:
        return "success vs k: k does not vary within any memory configuration in this sweep"
    fig, axes = _figure(len(panels))
    zero = cells[cells["method_kind"] == "zero_shot"]
    for ax, (column, lines) in zip(axes, panels, strict=True):
        firsts = pd.DataFrame([g.iloc[0] for g in lines])
        label_keys = _label_keys(firsts, columns, exclude=[column])
        for g in lines:
            g = g.assign(_k=g[column].astype(float)).sort_values("_k")
            ax.errorbar(
                g["_k"],
                100 * g["rate"],
                yerr=_errorbars(g),
                marker="o",
                capsize=3,
                label=_line_label(g.iloc[0], label_keys),
            )
        refs = zero.merge(firsts[["student", "benchmark", "protocol"]].drop_duplicates())
        for ref in refs.itertuples(index=False):
            ax.axhline(100 * cast(float, ref.rate), linestyle=":", color="grey")
            ax.annotate(
                f"zero-shot {ref.student}",
                (ax.get_xlim()[0], 100 * cast(float, ref.rate)),
                fontsize=7,
                color="grey",
                va="bottom",
            )
        # "k (NOTES)" for a `k_notes` column of a collection "notes": the setting, then the
        # collection it is of; a column of no collection is named as it is.
        name, of = columns.setting(column), columns.collection(column)
        ax.set_xlabel(f"{name} ({of.upper()})" if of else column)
        _rate_axis(ax)
        ax.set_title(f"Success vs {name}, {of.upper()}" if of else f"Success vs {column}")
        ax.xaxis.get_major_locator().set_params(integer=True)
        _legend(ax)
    fig.savefig(path, dpi=120)
    return None


def plot_student_size(
    cells: pd.DataFrame, path: Path, columns: MethodColumns | None = None
) -> str | None:
    """Success and gain over zero-shot vs student size (billions of parameters)."""
    students = cells[
        (cells["role"] == "student") & cells["student_params_b"].notna() & cells["n"].gt(0)
    ]
    if students["student_params_b"].nunique() < 2:
        return (
            "success vs student size: fewer than two student sizes (student_params_b) in this sweep"
        )
    fig, (left, right) = _figure(2)
    group_keys = [k for k in cell_keys(columns or MethodColumns()) if k != "student"]
    lines = list(students.groupby(group_keys, sort=False))
    firsts = pd.DataFrame([g.iloc[0] for _, g in lines])
    label_keys = _label_keys(firsts, columns, exclude=["student"])
    for _, g in lines:
        g = g.sort_values("student_params_b")
        label = _line_label(g.iloc[0], label_keys)
        left.errorbar(
            g["student_params_b"],
            100 * g["rate"],
            yerr=_errorbars(g),
            marker="o",
            capsize=3,
            label=label,
        )
        if g.iloc[0]["method_kind"] != "zero_shot" and g["gain_pp"].notna().any():
            right.plot(g["student_params_b"], g["gain_pp"], marker="o", label=label)
    sizes = sorted(students["student_params_b"].unique())
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{s:g}B" for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("student size (parameters)")
    _rate_axis(left)
    left.set_title("Success vs student size")
    _legend(left)
    right.axhline(0, color="grey", linewidth=0.8)
    right.set_ylabel("gain over zero-shot (points)")
    right.set_title("Gain over zero-shot vs student size")
    _legend(right)
    fig.savefig(path, dpi=120)
    return None


def plot_steps_vs_teacher(pairs: pd.DataFrame, path: Path) -> str | None:
    if pairs.empty:
        return (
            "steps vs teacher: no task scored for both a teacher and a student (no "
            "teacher point, or students evaluated on tasks the teacher never played)"
        )
    fig, (ax,) = _figure(1, width=5.5, height=5.0)
    label_keys = _varying(pairs, ["student", "method", "memory_types"]) or ["method"]
    rng = np.random.default_rng(0)  # a little jitter: integer steps overlap a lot
    for name, g in pairs.groupby(label_keys, sort=False):
        values = name if isinstance(name, tuple) else (name,)
        jitter = rng.uniform(-0.15, 0.15, size=(2, len(g)))
        ax.scatter(
            g["teacher_steps"] + jitter[0],
            g["student_steps"] + jitter[1],
            s=18,
            alpha=0.6,
            label=", ".join(_display(k, str(v)) for k, v in zip(label_keys, values, strict=True)),
        )
    top = float(max(pairs["teacher_steps"].max(), pairs["student_steps"].max())) + 1
    ax.plot([0, top], [0, top], linestyle="--", color="grey", linewidth=0.8, label="same steps")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("teacher steps on the task")
    ax.set_ylabel("student steps on the task")
    ax.set_title("Steps per task: student vs teacher")
    _legend(ax)
    fig.savefig(path, dpi=120)
    return None


def plot_success_vs_cost(
    cells: pd.DataFrame, use_usd: bool, path: Path, columns: MethodColumns | None = None
) -> str | None:
    figure = success_vs_cost_figure(cells, use_usd, columns)
    if isinstance(figure, str):
        return figure
    figure.savefig(path, dpi=120)
    return None


def success_vs_cost_figure(
    cells: pd.DataFrame, use_usd: bool, columns: MethodColumns | None = None
) -> Any:
    """The figure of success vs cost per point (a note when there is nothing to draw)."""
    column = "cost_usd" if use_usd else "cost_tokens"
    data = cells[cells["n"].gt(0) & cells[column].gt(0)]
    if data.empty:
        return "success vs cost: the sweep recorded no tokens or money for its points"
    fig, (ax,) = _figure(1, width=6.5, height=4.5)
    label_keys = _label_keys(data, columns, exclude=["student"])
    low, high = float(data[column].min()), float(data[column].max())
    log_x = high / low > 100  # costs span orders of magnitude: teacher API vs a small student
    middle = math.sqrt(low * high) if log_x else (low + high) / 2
    for student, g in data.groupby("student", sort=False):
        ax.errorbar(
            g[column], 100 * g["rate"], yerr=_errorbars(g), fmt="o", capsize=3, label=student
        )
        for _, row in g.iterrows():
            # Labels of the right half point left, so they stay inside the axes.
            right = row[column] > middle
            note = ax.annotate(
                _line_label(row, label_keys),
                (row[column], 100 * row["rate"]),
                fontsize=6,
                xytext=(-3 if right else 3, 3),
                textcoords="offset points",
                ha="right" if right else "left",
            )
            note.set_in_layout(False)  # a long label must not squash the axes
    ax.margins(x=0.08)
    if log_x:
        ax.set_xscale("log")  # said in the label: a log axis has no zero
    else:
        ax.set_xlim(left=0)  # costs from zero, so a point twice as far costs twice as much
    ax.set_xlabel(
        ("cost per point (USD, every stage it depends on)" if use_usd else
         "tokens per point (every stage it depends on)") + (", log scale" if log_x else "")
    )  # fmt: skip
    _rate_axis(ax)
    ax.set_title("Success vs cost")
    _legend(ax, title="agent")
    return fig


def plot_steps_by_method(
    steps: pd.DataFrame, path: Path, columns: MethodColumns | None = None
) -> str | None:
    figure = steps_by_method_figure(steps, columns)
    if isinstance(figure, str):
        return figure
    figure.savefig(path, dpi=120)
    return None


def steps_by_method_figure(steps: pd.DataFrame, columns: MethodColumns | None = None) -> Any:
    """Paper figure 3: mean steps per episode, one bar per method (and per setting that
    tells its cells apart, e.g. k) in each student's group, the teacher's as a dashed
    line, one panel per benchmark. Every bar is labelled with its value, so a method
    that took no step (a student answering in prose) shows as a 0, not as nothing."""
    data = steps[steps["n"].gt(0) & steps["mean_steps"].notna()] if not steps.empty else steps
    if data.empty:
        return "steps by method: no scored episode in this sweep"
    benchmarks = list(dict.fromkeys(data["benchmark"]))
    fig, axes = _figure(len(benchmarks), width=7.5, height=4.2)
    for ax, benchmark in zip(axes, benchmarks, strict=True):
        everything = data[data["benchmark"] == benchmark]
        # The teacher is a reference line across the students' groups (as in the
        # paper's figure), not a group of its own.
        teachers = everything[everything["role"] == "teacher"]
        panel = everything[everything["role"] != "teacher"]
        top = float(everything["mean_steps"].max())
        for name, g in teachers.groupby("method", sort=False):
            ax.axhline(
                float(g["mean_steps"].mean()), color="grey", linestyle="--", linewidth=1,
                label=_display("method", str(name)),
            )  # fmt: skip
        students = list(dict.fromkeys(panel["student"]))
        # One series per method and whatever tells its cells of a student apart.
        label_keys = distinguishing(
            panel, ["student", "method"], [k for k in disambiguators(columns) if k != "student"]
        )
        label_keys.remove("student")
        series = list(
            dict.fromkeys(tuple(r[k] for k in label_keys) for r in panel.to_dict("records"))
        )
        width = 0.8 / max(1, len(series))
        for i, values in enumerate(series):
            mask = np.logical_and.reduce(
                [panel[k] == v for k, v in zip(label_keys, values, strict=True)]
            )
            rows = panel[mask].groupby("student", sort=False)["mean_steps"].mean()
            x = [students.index(s) + (i - (len(series) - 1) / 2) * width for s in rows.index]
            label = _line_label(dict(zip(label_keys, values, strict=True)), label_keys)
            bars = ax.bar(
                x, rows.values, width=width, label=label, edgecolor="black", linewidth=0.6
            )
            ax.bar_label(bars, labels=[f"{v:.1f}" for v in rows.values], fontsize=7, padding=2)
        ax.set_ylim(0, max(1.0, top) * 1.15)  # room for the labels; a 0 bar still shows "0.0"
        ax.set_xticks(range(len(students)), students, fontsize=8)
        ax.set_ylabel("mean steps per episode")
        ax.set_title(f"Steps per episode by method: {benchmark}")
        _legend(ax)
    return fig
