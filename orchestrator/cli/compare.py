"""`distillery compare RUN_A RUN_B`: task by task, what one evaluation point solved and
the other did not, with McNemar's paired test on the tasks both scored.

    distillery compare RUN_A RUN_B [--root OUTPUT_ROOT] [--tracking-uri URI] [--csv FILE]

RUN_A and RUN_B are point ids (as in `points.parquet` and the report) or MLflow run ids
of evaluation child runs, or unique prefixes (6+ characters) of either. They are looked
up in every sweep under the output root (`--root`, default distillery_runs); an MLflow
run id found in no sweep there is read from MLflow itself (its per-task results table),
so points of different output roots can be compared too.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from distillery.orchestrator.core.stats import McNemar, mcnemar
from distillery.orchestrator.report import BASE_CELL_KEYS, ReportError, SweepData, load_sweep
from distillery.orchestrator.state.sweep_tables import METHOD_COLUMNS_TAG
from distillery.orchestrator.tracking.links import run_url
from distillery.workers.storage import Location

_MIN_PREFIX = 6
# A lookup in a tracking server: one retry, this long a request (a down server fails fast).
LOOKUP_TIMEOUT_S = 10
_RUN_ID = re.compile(r"[0-9a-f]{32}")
# What a point is described by, in display order: the report's cell keys (its memory
# method's own report columns follow, see `EvalSide.keys`) plus the seed.
DESCRIPTOR_KEYS: tuple[str, ...] = (*BASE_CELL_KEYS, "seed")
_OUTCOME_COLUMNS = ("success", "termination", "total_steps", "tokens_in", "tokens_out")


class CompareError(Exception):
    """A run the user named cannot be found or compared: message only."""


@dataclass(frozen=True)
class EvalSide:
    """One evaluation point: what it is and its outcome per task."""

    point_id: str
    run_id: str | None
    descriptors: Mapping[str, str]
    outcomes: pd.DataFrame  # index task_id; success (boolean, NA = not scored), ...
    source: str  # the sweep directory or MLflow store it was read from
    tracking_uri: str | None = None
    eval_task_ids_sha: str = ""
    experiment_id: str | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """The descriptors in display order (a memory method's own before the seed)."""
        return (*DESCRIPTOR_KEYS[:-1], *_method_keys(self.descriptors), DESCRIPTOR_KEYS[-1])

    def label(self) -> str:
        d = self.descriptors
        rest = " ".join(
            f"{k}={d[k]}" for k in self.keys if k != "method" and d.get(k) not in ("", None)
        )
        return f"{d.get('method', '?')} {rest}".strip()


@dataclass(frozen=True)
class Comparison:
    a: EvalSide
    b: EvalSide
    paired: pd.DataFrame  # tasks scored by both: task_id, a_*/b_* columns, solved_by
    unpaired: tuple[str, ...]  # tasks evaluated by one only, or not scored by one
    test: McNemar

    @property
    def only_a(self) -> pd.DataFrame:
        return self.paired[self.paired["solved_by"] == "A only"]

    @property
    def only_b(self) -> pd.DataFrame:
        return self.paired[self.paired["solved_by"] == "B only"]

    def count(self, solved_by: str) -> int:
        return int((self.paired["solved_by"] == solved_by).sum())

    def differing_keys(self) -> list[str]:
        keys = dict.fromkeys([*self.a.keys, *self.b.keys])
        return [
            k
            for k in keys
            if (self.a.descriptors.get(k) or "") != (self.b.descriptors.get(k) or "")
        ]


def _method_keys(descriptors: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(k for k in descriptors if k not in DESCRIPTOR_KEYS)


def compare(a: EvalSide, b: EvalSide) -> Comparison:
    """Pair the two points on the tasks both scored (an infrastructure failure is not a
    result, so it pairs with nothing). b = tasks only A solved, c = only B solved."""
    left = a.outcomes.add_prefix("a_")
    right = b.outcomes.add_prefix("b_")
    joined = left.join(right, how="outer")
    scored = joined["a_success"].notna() & joined["b_success"].notna()
    paired = joined[scored].copy()
    won_a = paired["a_success"].astype(bool)
    won_b = paired["b_success"].astype(bool)
    paired["solved_by"] = "neither"
    paired.loc[won_a & won_b, "solved_by"] = "both"
    paired.loc[won_a & ~won_b, "solved_by"] = "A only"
    paired.loc[~won_a & won_b, "solved_by"] = "B only"
    paired = paired.reset_index(names="task_id")
    unpaired = tuple(str(t) for t in joined.index[~scored])
    test = mcnemar(int((won_a & ~won_b).sum()), int((~won_a & won_b).sum()))
    return Comparison(a, b, paired, unpaired, test)


# -- finding the points ---------------------------------------------------------------


def _sweeps_under(root: str) -> list[SweepData]:
    loc = Location.of(root)
    if not loc.exists():
        return []
    if (loc / "sweep.json").exists():
        candidates = [loc]
    else:
        base = loc / "sweeps" if (loc / "sweeps").exists() else loc
        candidates = [s for s in base.subdirs() if (s / "points.parquet").exists()]
    sweeps = []
    for sub in candidates:
        try:
            sweeps.append(load_sweep(sub)[0])
        except ReportError:
            continue  # an unfinished or foreign folder: not a place to look
    # Newest first: a point shared by several sweeps is read from the latest one.
    return sorted(sweeps, key=lambda s: float(s.meta.get("created_at") or 0.0), reverse=True)


def _matches(data: SweepData, name: str) -> pd.DataFrame:
    """Points whose point id or MLflow run id is `name`, or starts with it when `name`
    is long enough to be a prefix."""
    points = data.points
    ids = points["point_id"].astype(str)
    runs = points["mlflow_run_id"].fillna("").astype(str)
    exact = (ids == name) | (runs == name)
    if exact.any() or len(name) < _MIN_PREFIX:
        return points[exact]
    return points[ids.str.startswith(name) | (runs.str.startswith(name) & (runs != ""))]


def _side_from_sweep(data: SweepData, row: Mapping[str, Any]) -> EvalSide:
    episodes = data.episodes[data.episodes["point_id"] == row["point_id"]]
    columns = [c for c in (*_OUTCOME_COLUMNS, "error_type") if c in episodes.columns]
    outcomes = episodes.set_index("task_id")[columns]
    run_id = row.get("mlflow_run_id")
    return EvalSide(
        point_id=str(row["point_id"]),
        run_id=str(run_id) if run_id else None,
        descriptors={k: str(row.get(k, "")) for k in (*DESCRIPTOR_KEYS, *data.columns.cell_order)},
        outcomes=outcomes,
        source=data.location.uri,
        tracking_uri=data.meta.get("tracking_uri"),
        eval_task_ids_sha=str(row.get("eval_task_ids_sha") or ""),
        experiment_id=data.meta.get("mlflow_experiment_id"),
    )


def find_side(name: str, sweeps: Sequence[SweepData], tracking_uri: str | None) -> EvalSide:
    """The evaluation point `name` designates (see the module docstring)."""
    found: dict[Any, tuple[SweepData, dict[Any, Any]]] = {}
    for data in sweeps:
        for row in _matches(data, name).to_dict("records"):
            # One point, several sweeps: the first (newest) sweep's row wins; but an MLflow
            # run id names exactly one sweep's row.
            if row["point_id"] not in found or row.get("mlflow_run_id") == name:
                found[row["point_id"]] = (data, row)
    if len(found) > 1:
        listed = ", ".join(sorted(found)[:5])
        raise CompareError(f"{name!r} is ambiguous: it matches points {listed}; give more of it")
    if found:
        data, row = next(iter(found.values()))
        return _side_from_sweep(data, row)
    uris = [tracking_uri] if tracking_uri else []
    uris += [str(s.meta["tracking_uri"]) for s in sweeps if s.meta.get("tracking_uri")]
    for uri in dict.fromkeys(uris):
        run_id = name if _RUN_ID.fullmatch(name) else run_id_by_prefix(name, uri)
        side = side_from_mlflow(run_id, uri) if run_id else None
        if side is not None:
            return side
    where = f" or in MLflow at {', '.join(dict.fromkeys(uris))}" if uris else ""
    if len(name) < _MIN_PREFIX:
        where += f" (a prefix needs at least {_MIN_PREFIX} characters)"
    raise CompareError(
        f"{name!r} is neither a point id nor an MLflow run id of an evaluation point in the "
        f"sweeps under the output root{where}; `distillery report` lists the points and "
        "their runs"
    )


def run_id_by_prefix(prefix: str, tracking_uri: str) -> str | None:
    """The evaluation run whose id starts with `prefix` (at least _MIN_PREFIX hex
    characters), among the store's evaluation runs; None when none does. A prefix two
    runs share is refused as ambiguous."""
    if len(prefix) < _MIN_PREFIX or not re.fullmatch(r"[0-9a-f]+", prefix):
        return None
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from distillery.orchestrator.report.publish import bounded_mlflow, tracking_store_missing

    if tracking_store_missing(tracking_uri):
        return None
    client = MlflowClient(tracking_uri)
    try:
        # A tracking server that is down fails the lookup in seconds, not minutes.
        with bounded_mlflow(LOOKUP_TIMEOUT_S):
            experiments = [e.experiment_id for e in client.search_experiments(max_results=1000)]
            runs = client.search_runs(
                experiments,
                filter_string="tags.`mlflow.runType` = 'genai_evaluate'",
                max_results=5000,
            )
    except (MlflowException, OSError):
        return None  # a store that cannot be read has no such run: the caller says where it looked
    found = sorted({r.info.run_id for r in runs if r.info.run_id.startswith(prefix)})
    if len(found) > 1:
        raise CompareError(
            f"{prefix!r} is ambiguous: it starts MLflow runs {', '.join(found[:5])}; give more of it"
        )
    return found[0] if found else None


def side_from_mlflow(run_id: str, tracking_uri: str) -> EvalSide | None:
    """An evaluation child run read from MLflow: its tags and per-task results table.
    None when the store has no such run."""
    import os

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from distillery.orchestrator.report.publish import bounded_mlflow, tracking_store_missing

    if tracking_store_missing(tracking_uri):
        return None
    client = MlflowClient(tracking_uri)
    try:
        with bounded_mlflow(LOOKUP_TIMEOUT_S):  # a silent server: seconds, not minutes
            run = client.get_run(run_id)
    except MlflowException as exc:
        if "RESOURCE_DOES_NOT_EXIST" in str(exc.error_code):
            return None
        raise CompareError(f"MLflow at {tracking_uri}: {exc.message}") from None
    try:
        with tempfile.TemporaryDirectory() as tmp, bounded_mlflow(LOOKUP_TIMEOUT_S):
            local = client.download_artifacts(run_id, "results.json", tmp)
            table = pd.read_json(local, orient="split", dtype=False)
    except (MlflowException, OSError, ValueError) as exc:
        raise CompareError(f"MLflow run {run_id} has no per-task results table ({exc})") from None
    if "task_id" not in table.columns or "success" not in table.columns:
        raise CompareError(f"MLflow run {run_id}'s results.json has no task_id/success columns")
    table = table.drop_duplicates("task_id", keep="last")
    table["success"] = table["success"].astype("boolean")
    table["task_id"] = table["task_id"].astype(str)
    columns = [c for c in (*_OUTCOME_COLUMNS, "error_type") if c in table.columns]
    tags = run.data.tags
    # The method's report columns, as the run lists them (runs of older versions do not).
    own = [k for k in tags.get(METHOD_COLUMNS_TAG, "").split(",") if k]
    return EvalSide(
        point_id=tags.get("distillery.point_id", ""),
        run_id=run_id,
        descriptors={k: tags.get(k, "") for k in (*DESCRIPTOR_KEYS, *own)},
        outcomes=table.set_index("task_id")[columns],
        source=f"MLflow {tracking_uri}",
        tracking_uri=tracking_uri,
        eval_task_ids_sha=run.data.params.get("eval_task_ids_sha", ""),
        experiment_id=run.info.experiment_id,
    )


# -- output -----------------------------------------------------------------------------


def _text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [[str(h) for h in headers], *[["" if v is None else str(v) for v in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return [
        "  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells
    ]


def _outcome(row: Mapping[Any, Any], side: str) -> list[Any]:
    error = row.get(f"{side}_error_type")
    error = "" if error is None or pd.isna(error) else str(error)
    steps = row.get(f"{side}_total_steps")
    return [
        row.get(f"{side}_termination") or "",
        "" if steps is None or pd.isna(steps) else int(steps),
        error,
    ]


def _p(test: McNemar) -> str:
    how = "exact binomial" if test.method == "exact" else "chi-square, continuity-corrected"
    return f"{how} p = {test.p:.3g}"


def format_comparison(result: Comparison, ui_url: str | None = None) -> str:
    a, b = result.a, result.b
    lines = []
    for tag, side in (("A", a), ("B", b)):
        run = f"run {side.run_id}" if side.run_id else "no MLflow run"
        lines.append(f"{tag}: {side.label()}")
        lines.append(f"   point {side.point_id or '?'} · {run} · {side.source}")
    differing = result.differing_keys()
    lines.append(f"They differ in: {', '.join(differing) if differing else 'nothing (same point)'}")
    n = len(result.paired)
    same_split = a.eval_task_ids_sha and a.eval_task_ids_sha == b.eval_task_ids_sha
    split = "same evaluated split" if same_split else "the evaluated splits differ"
    lines.append(f"Paired on {n} task(s) scored by both ({split}).")
    if result.unpaired:
        shown = ", ".join(result.unpaired[:5]) + (" ..." if len(result.unpaired) > 5 else "")
        lines.append(
            f"Not paired (evaluated or scored by one only): {len(result.unpaired)}: {shown}"
        )
    if n:
        won_a = result.count("A only") + result.count("both")
        won_b = result.count("B only") + result.count("both")
        lines.append(
            f"A solved {won_a}/{n} ({won_a / n:.1%}), B solved {won_b}/{n} ({won_b / n:.1%}); "
            f"both {result.count('both')}, neither {result.count('neither')}"
        )
    test = result.test
    lines.append(f"McNemar: b = {test.b} (A only), c = {test.c} (B only), {_p(test)}")
    headers = ["task", "A termination", "A steps", "A error", "B termination", "B steps", "B error"]
    for title, frame in (("A only", result.only_a), ("B only", result.only_b)):
        lines += ["", f"Solved by {title} ({len(frame)}):"]
        if frame.empty:
            lines.append("  (none)")
            continue
        rows = [
            [row["task_id"], *_outcome(row, "a"), *_outcome(row, "b")]
            for row in frame.to_dict("records")
        ]
        lines += _text_table(headers, rows)
    links = [
        (tag, run_url(side.tracking_uri, side.run_id, side.experiment_id, ui_url))
        for tag, side in (("A", a), ("B", b))
    ]
    if any(url for _, url in links):
        lines.append("")
        lines += [f"{tag} in MLflow: {url}" for tag, url in links if url]
    return "\n".join(lines)


def comparison_frame(result: Comparison) -> pd.DataFrame:
    """Every task of either side, with both outcomes and who solved it (CSV export)."""
    paired = result.paired
    unpaired = pd.DataFrame({"task_id": list(result.unpaired), "solved_by": "not paired"})
    return pd.concat([paired, unpaired], ignore_index=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="distillery compare",
        description="Per-task disagreement of two evaluation points, with McNemar counts.",
    )
    parser.add_argument("run_a", help="point id or MLflow run id (or a unique prefix)")
    parser.add_argument("run_b", help="point id or MLflow run id (or a unique prefix)")
    parser.add_argument(
        "--root",
        default="distillery_runs",
        help="output root (or one sweep directory) to look the points up in "
        "(default: distillery_runs)",
    )
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow store for run ids found in no sweep (default: the sweeps' own)",
    )
    parser.add_argument("--mlflow-ui", default=None, help="MLflow UI address for the links")
    parser.add_argument("--csv", default=None, help="also write every task's outcomes here")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        sweeps = _sweeps_under(args.root)
        a = find_side(args.run_a, sweeps, args.tracking_uri)
        b = find_side(args.run_b, sweeps, args.tracking_uri)
    except CompareError as exc:
        print(f"distillery compare: {exc}", file=sys.stderr)
        return 2
    result = compare(a, b)
    print(format_comparison(result, args.mlflow_ui))
    if args.csv:
        comparison_frame(result).to_csv(Path(args.csv), index=False)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
