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
from distillery.orchestrator.sweep_tables import MethodColumns


def _figure(ncols: int = 1, width: float = 6.0, height: float = 4.2) -> Any:
    # An explicit Figure with the Agg canvas: no pyplot global state, no display needed,
    # and no backend switch imposed on a process that imports this module.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


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
        ax.set_ylabel("success rate (%)")
        ax.set_title(f"Success vs {name}, {of.upper()}" if of else f"Success vs {column}")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
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
    left.set_ylabel("success rate (%)")
    left.set_title("Success vs student size")
    left.legend(fontsize=7)
    right.axhline(0, color="grey", linewidth=0.8)
    right.set_ylabel("gain over zero-shot (points)")
    right.set_title("Gain over zero-shot vs student size")
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
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
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)
    return None


def plot_success_vs_cost(
    cells: pd.DataFrame, use_usd: bool, path: Path, columns: MethodColumns | None = None
) -> str | None:
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
        ax.set_xscale("log")
    ax.set_xlabel(
        "cost per point (USD, every stage it depends on)"
        if use_usd
        else "tokens per point (every stage it depends on)"
    )
    ax.set_ylabel("success rate (%)")
    ax.set_title("Success vs cost")
    ax.legend(fontsize=7, title="agent")
    fig.savefig(path, dpi=120)
    return None


def plot_steps_by_method(steps: pd.DataFrame, path: Path) -> str | None:
    """Paper figure 3: mean steps per episode, one bar per method in each student's
    group, the teacher's as a dashed line, one panel per benchmark."""
    data = steps[steps["n"].gt(0) & steps["mean_steps"].notna()] if not steps.empty else steps
    if data.empty:
        return "steps by method: no scored episode in this sweep"
    benchmarks = list(dict.fromkeys(data["benchmark"]))
    fig, axes = _figure(len(benchmarks), width=6.5, height=4.2)
    for ax, benchmark in zip(axes, benchmarks, strict=True):
        everything = data[data["benchmark"] == benchmark]
        # The teacher is a reference line across the students' groups (as in the
        # paper's figure), not a group of its own.
        teachers = everything[everything["role"] == "teacher"]
        panel = everything[everything["role"] != "teacher"]
        for name, g in teachers.groupby("method", sort=False):
            ax.axhline(
                float(g["mean_steps"].mean()), color="grey", linestyle="--", linewidth=1,
                label=_display("method", str(name)),
            )  # fmt: skip
        students = list(dict.fromkeys(panel["student"]))
        methods = list(dict.fromkeys(panel["method"]))
        width = 0.8 / max(1, len(methods))
        for i, method in enumerate(methods):
            rows = panel[panel["method"] == method].groupby("student", sort=False)["mean_steps"]
            means = rows.mean()
            x = [students.index(s) + (i - (len(methods) - 1) / 2) * width for s in means.index]
            ax.bar(x, means.values, width=width, label=_display("method", method))
        ax.set_xticks(range(len(students)), students, fontsize=8)
        ax.set_ylabel("mean steps per episode")
        ax.set_title(f"Steps per episode by method: {benchmark}")
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)
    return None
