"""The report's text: Markdown tables, number formats, the cost line and report.md."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pandas as pd

from distillery.orchestrator.report.costs import CATEGORIES, gpu_time
from distillery.orchestrator.report.load import SweepData
from distillery.orchestrator.report.scenarios import scenario_labels
from distillery.orchestrator.report.stats import _NA
from distillery.orchestrator.report.tables import (
    Table,
    _display,
    disambiguators,
    distinguishing,
)


def _md_escape(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(_md_escape(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join(_md_escape(v) for v in row) + " |"
        for row in frame.itertuples(index=False, name=None)
    ]
    return "\n".join([header, rule, *body])


def _money(usd: float) -> str:
    """Three significant digits below $1 (small sweeps cost cents), cents above."""
    if usd == 0:
        return "$0"
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.3g}"


def _fixed(digits: int) -> Any:
    """A formatter that shows a missing number (NaN) as "–", not "nan"."""
    return lambda v: _NA if v is None or pd.isna(v) else f"{v:.{digits}f}"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _cost_line(breakdown: pd.DataFrame, use_usd: bool, unpriced: list[str]) -> str:
    total = breakdown[breakdown["category"] == "total"].iloc[0]
    parts = breakdown[(breakdown["category"] != "total")]
    time_used = (
        f"{total['wall_s']:.0f} s wall, {total['gpu_s']:.0f} GPU-s serving"
        f" + {total.get('gpu_idle_s', 0.0):.0f} GPU-s held idle"
    )
    if parts.empty:
        return "no stages recorded"
    if not use_usd:
        by_category = ", ".join(
            f"{r.category} {int(cast(Any, r.tokens)):,}" for r in parts.itertuples()
        )
        return (
            f"{int(total['tokens']):,} tokens in all ({by_category}); {time_used}; "
            "no prices (set cost.prices to get USD)"
        )
    by_category = ", ".join(f"{r.category} {_money(cast(Any, r.usd))}" for r in parts.itertuples())
    line = f"{_money(total['usd'])} in all ({by_category}); {int(total['tokens']):,} tokens, "
    line += time_used
    if unpriced:
        line += f"; no price for {', '.join(unpriced)} (counted as $0)"
    return line


def _key_columns(
    frame: pd.DataFrame, base: Sequence[str], candidates: Sequence[str]
) -> dict[str, pd.Series]:
    """Display columns for `base` plus whatever descriptors (`candidates`, see
    `tables.disambiguators`) tell its rows apart."""
    keys = distinguishing(frame, base, candidates)
    return {k: frame[k].map(lambda v, k=k: _display(k, str(v))) for k in keys}


def _overflows(summary: Mapping[str, Any]) -> str:
    n = summary.get("n_context_overflow", 0)
    return f"; {n} context overflows, scored as failures" if n else ""


def render_markdown(
    data: SweepData,
    summary: Mapping[str, Any],
    tables: Sequence[Table],
    tests: pd.DataFrame,
    steps: pd.DataFrame,
    breakdown: pd.DataFrame,
    point_view: pd.DataFrame,
    plots: Mapping[str, Path],
    notes: Sequence[str],
    use_usd: bool,
    references: pd.DataFrame | None = None,
    steps_method: pd.DataFrame | None = None,
    scenarios: pd.DataFrame | None = None,
    zero_shot_referenced: bool = False,
    by_model: pd.DataFrame | None = None,
) -> str:
    meta = data.meta
    candidates = disambiguators(data.columns)
    created = meta.get("created_at")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(created))) if created else "?"
    md = [
        f"# Sweep report: {data.sweep_id}",
        "",
        f"Experiment `{meta.get('experiment', '?')}` · {summary['n_points']} points · "
        f"{summary['n_episodes']} episodes ({summary['n_scored']} scored, "
        f"{summary['n_infra']} infrastructure failures, not scored"
        f"{_overflows(summary)}) · seeds "
        f"{', '.join(map(str, summary['seeds'])) or _NA} · git `{meta.get('git_sha', '?')}` · "
        f"created {when}",
        "",
        "Each cell: success rate over scored episodes pooled over seeds, [95 % Wilson "
        "interval], n = scored episodes; with several seeds, then the mean ± sample std of "
        "the per-seed success rates (percent). A cell is every point with the same "
        "descriptors except the seed.",
    ]
    for table in tables:
        md += ["", f"## {table.title}", "", markdown_table(table.markdown)]
    if scenarios is not None and not scenarios.empty:
        md += _scenario_section(scenarios, candidates)
    if zero_shot_referenced:
        pass  # zero-shot is a reference: its tests are in the reference section
    elif tests.empty:
        md += ["", "## Paired test against zero-shot (McNemar)", ""]
        md.append(
            "No method point has a zero-shot point of the same student, benchmark, "
            "protocol and seed to pair with."
        )
    else:
        md += ["", "## Paired test against zero-shot (McNemar)", ""]
        md.append(
            "Same student, benchmark, protocol and seed, on the tasks scored in both. "
            "b = tasks only the method solved, c = tasks only zero-shot solved; exact "
            "binomial test when b + c < 25, else chi-square with continuity correction."
        )
        md.append("")
        view = pd.DataFrame(
            {
                **_key_columns(tests, ["method", "student"], candidates),
                "seed": tests["seed"],
                "tasks": tests["n_pairs"],
                "method %": (100 * tests["rate"]).map(_fixed(1)),
                "zero-shot %": (100 * tests["zero_shot_rate"]).map(_fixed(1)),
                "b": tests["b"],
                "c": tests["c"],
                "test": tests["test"],
                "p": tests["p"].map(_p),
            }
        )
        md.append(markdown_table(view))
    if references is not None and not references.empty:
        md += _reference_section(references, candidates)
    if steps_method is not None and not steps_method.empty:
        md += _steps_method_section(steps_method, candidates)
    md += ["", "## Cost", ""]
    md.append(
        "By category, every distinct stage counted once (what the sweep spent). Embedding "
        "tokens are approximate. Wall time and GPU-seconds stay with the stage that used "
        "them."
    )
    md.append("")
    md.append(
        markdown_table(
            pd.DataFrame(
                {
                    "category": breakdown["category"],
                    "tokens in": breakdown["tokens_in"].map("{:,}".format),
                    "tokens out": breakdown["tokens_out"].map("{:,}".format),
                    "embedding tokens": breakdown["embed_tokens"].map("{:,}".format),
                    "LLM calls": breakdown["n_llm_calls"].map("{:,}".format),
                    "wall s": breakdown["wall_s"].map("{:.0f}".format),
                    "GPU s": breakdown["gpu_s"].map("{:.0f}".format),
                    "idle GPU s": breakdown["gpu_idle_s"].map("{:.0f}".format),
                    "USD": breakdown["usd"].map(_money),
                }
            )
        )
    )
    if by_model is not None and not by_model.empty:
        md += [
            "",
            "By stage kind, role and model (a stage that calls several models has a row each):",
            "",
        ]
        md.append(
            markdown_table(
                pd.DataFrame(
                    {
                        "stage kind": by_model["kind"],
                        "role": by_model["role"],
                        "model": by_model["model"],
                        "tokens in": by_model["tokens_in"].map("{:,}".format),
                        "tokens out": by_model["tokens_out"].map("{:,}".format),
                        "LLM calls": by_model["n_llm_calls"].map("{:,}".format),
                        "GPU s": by_model["gpu_s"].map("{:.0f}".format),
                        "idle GPU s": by_model["gpu_idle_s"].map("{:.0f}".format),
                        "USD": by_model["usd"].map(_money),
                    }
                )
            )
        )
    held = gpu_time(data.location)
    if not held.empty:
        md += [
            "",
            "GPU time of each model's servers, over every run of the sweep: held (up, "
            "paid for) and serving (a request in flight); idle is held and not serving "
            "(a model waiting for its next stage, a stage's tail):",
            "",
            markdown_table(
                pd.DataFrame(
                    {
                        "model": held["model"],
                        "GPUs": held["gpus"].map("{:g}".format),
                        "GPU-h held": held["held_gpu_h"].map("{:.3f}".format),
                        "GPU-h serving": held["serving_gpu_h"].map("{:.3f}".format),
                        "GPU-h idle": held["idle_gpu_h"].map("{:.3f}".format),
                        "busy": held["busy"].map(
                            lambda v: _NA if v is None or pd.isna(v) else f"{v:.0%}"
                        ),
                    }
                )
            ),
        ]
    if not use_usd:
        md += ["", "No prices in `cost.prices`: money is 0 and plots use tokens."]
    if summary["unpriced"]:
        md += [
            "",
            f"No price for: {', '.join(summary['unpriced'])} (their tokens count, "
            "their money is 0: the USD total is a lower bound).",
        ]
    md += [
        "",
        "Per point, every stage it depends on counted in full (what reproducing that "
        "one result alone would cost):",
        "",
    ]
    md.append(
        markdown_table(
            pd.DataFrame(
                {
                    **_key_columns(
                        point_view,
                        ["method", "student", "benchmark", "protocol", "seed"],
                        candidates,
                    ),
                    "tokens": point_view["tokens"].map("{:,}".format),
                    **{f"USD {c}": point_view[f"usd_{c}"].map(_money) for c in CATEGORIES},
                    "USD": point_view["usd"].map(_money),
                    "wall s": point_view["wall_s"].map("{:.0f}".format),
                }
            )
        )
    )
    if not steps.empty:
        md += [
            "",
            "## Steps per task against the teacher",
            "",
            "Mean steps on the tasks scored for both; and on the tasks both solved.",
            "",
        ]
        md.append(
            markdown_table(
                pd.DataFrame(
                    {
                        **_key_columns(
                            steps, ["student", "method", "benchmark", "protocol"], candidates
                        ),
                        "tasks": steps["n_tasks"],
                        "student steps": steps["student_steps"].map(_fixed(2)),
                        "teacher steps": steps["teacher_steps"].map(_fixed(2)),
                        "ratio": steps["ratio"].map(_fixed(2)),
                        "both solved": steps["n_both_solved"],
                        "student (both solved)": steps["student_steps_both_solved"].map(_fixed(2)),
                        "teacher (both solved)": steps["teacher_steps_both_solved"].map(_fixed(2)),
                    }
                )
            )
        )
    titles = {
        "success_vs_k": "Success vs k",
        "student_size": "Success and gain vs student size",
        "steps_vs_teacher": "Steps per task against the teacher",
        "success_vs_cost": "Success vs cost",
        "steps_by_method": "Steps per episode by method",
    }
    if plots:
        md += ["", "## Plots", ""]
        md += [f"![{titles[name]}]({path.name})" for name, path in plots.items()]
    if notes:
        md += ["", "## Not shown", ""]
        md += [f"- {n}" for n in notes]
    md += [
        "",
        "Tables as CSV: "
        + ", ".join(
            f"[{t}.csv]({t}.csv)"
            for t in [
                "cells",
                *(t.name for t in tables),
                "mcnemar",
                "costs_breakdown",
                "costs_points",
                "costs_stages",
            ]
        )
        + ("" if steps.empty else ", [steps_vs_teacher.csv](steps_vs_teacher.csv)")
        + ("" if references is None else ", [mcnemar_references.csv](mcnemar_references.csv)")
        + ("" if steps_method is None else ", [steps_by_method.csv](steps_by_method.csv)")
        + (
            ""
            if scenarios is None or scenarios.empty
            else ", [scenario_goal_completion.csv](scenario_goal_completion.csv)"
        ),
        "",
    ]
    return "\n".join(md)


def _scenario_section(table: pd.DataFrame, candidates: Sequence[str]) -> list[str]:
    """Task and scenario goal completion per point (a benchmark's official pair)."""
    md = ["", "## Task and scenario goal completion", ""]
    md.append(
        "Per point (method × student × seed). Task goal completion: the success rate "
        "over scored tasks (n = tasks). Scenario goal completion: the share of scenarios "
        "(tasks sharing a group id, e.g. AppWorld's task id before `_`) all of whose "
        "tasks succeeded, over the scenarios whose tasks were all scored (n = scenarios; "
        "one with an infrastructure failure is counted as unscored), among the tasks the "
        "point evaluated (a `limit` may cut a scenario short). 95 % Wilson intervals."
    )
    md.append("")
    view = pd.DataFrame(
        {
            **_key_columns(table, ["benchmark", "method", "student"], candidates),
            "seed": table["seed"],
            **scenario_labels(table),
        }
    )
    md.append(markdown_table(view))
    return md


def _reference_section(tests: pd.DataFrame, candidates: Sequence[str]) -> list[str]:
    """Every student method against each reference method, per seed (McNemar)."""
    md = ["", "## Paired tests against the reference methods (McNemar)", ""]
    md.append(
        "References: "
        + ", ".join(f"`{r}`" for r in dict.fromkeys(tests["reference"]))
        + " (`report.references`, or `distillery report --against`). Same student, "
        "benchmark, protocol and seed, on the tasks scored in both; b = tasks only the "
        "method solved, c = tasks only the reference solved."
    )
    md.append("")
    view = pd.DataFrame(
        {
            **_key_columns(tests, ["method", "student"], candidates),
            "seed": tests["seed"],
            "against": tests["reference_method"],
            "tasks": tests["n_pairs"],
            "method %": (100 * tests["rate"]).map(_fixed(1)),
            "reference %": (100 * tests["reference_rate"]).map(_fixed(1)),
            "b": tests["b"],
            "c": tests["c"],
            "test": tests["test"],
            "p": tests["p"].map(_p),
        }
    )
    md.append(markdown_table(view))
    return md


def _steps_method_section(steps: pd.DataFrame, candidates: Sequence[str]) -> list[str]:
    """Paper figure 3 as a table: mean steps per scored episode of every method."""
    md = ["", "## Steps per episode by method", ""]
    md.append("Mean steps per scored episode (the teacher's: its collection), n = episodes.")
    md.append("")
    view = pd.DataFrame(
        {
            **_key_columns(steps, ["benchmark", "student", "method"], candidates),
            "n": steps["n"],
            "mean steps": steps["mean_steps"].map(_fixed(2)),
        }
    )
    md.append(markdown_table(view))
    return md
