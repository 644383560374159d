"""Cost accounting of a sweep: tokens, money, wall time and GPU-seconds per stage, per
evaluation point and for the whole sweep, from the sweep's `stages.parquet` and the
price table the sweep was run with (`cost.prices`, copied into `sweep.json`).

Two totals answer two questions, and both are reported:

- per point: what it would cost to reproduce this one result alone, i.e. every stage
  the point depends on counted in full (a teacher collection shared by 20 points is in
  each of their costs);
- per sweep: what the sweep actually spent, every distinct stage counted once.

Costs are broken down by category: teacher `collection` (collect stages), `memory
building` (build and render stages' LLM calls), `embeddings` (the embedding input of
any stage) and student `evaluation` (evaluate stages). Wall time and GPU-seconds of a
stage cannot be split between its LLM calls and its embeddings, so they stay with the
stage's own category.

A model without a price costs 0 USD but still reports its tokens; `unpriced_models`
names such models so the report can say the money total is a lower bound.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pandas as pd

from distillery.workers.storage import Location

log = logging.getLogger(__name__)

# Category of a stage kind's own tokens; embeddings are always their own category.
KIND_CATEGORY: Mapping[str, str] = MappingProxyType(
    {
        "collect": "collection",
        "build": "memory building",
        "render": "memory building",
        "evaluate": "evaluation",
    }
)
EMBEDDINGS = "embeddings"
CATEGORIES: tuple[str, ...] = ("collection", "memory building", EMBEDDINGS, "evaluation")
# Stage "models" that make no LLM calls: never reported as missing a price.
NO_LLM_MODELS = frozenset({"oracle", "none", ""})

STAGE_COLUMNS = (
    "stage_hash",
    "kind",
    "role",
    "model",
    "tokens_in",
    "tokens_out",
    "n_llm_calls",
    "embed_tokens",
    "wall_s",
    "gpu_s",
)
_SUMMED = (
    "tokens_in",
    "tokens_out",
    "n_llm_calls",
    "embed_tokens",
    "wall_s",
    "gpu_s",
    "gpu_idle_s",
    "usd",
)
_MTOK = 1_000_000.0


@dataclass(frozen=True)
class ModelPrice:
    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0


@dataclass(frozen=True)
class PriceTable:
    """USD prices: per model per million input/output tokens, per million embedding
    input tokens, and per GPU-hour held by launched servers."""

    models: Mapping[str, ModelPrice] = field(default_factory=dict)
    embedding_per_mtok: float = 0.0
    gpu_hour: float = 0.0

    def __post_init__(self) -> None:
        # Read-only view: a frozen table whose dict could still be mutated is not frozen.
        object.__setattr__(self, "models", MappingProxyType(dict(self.models)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PriceTable:
        """The `prices` object of sweep.json (`CostConfig.prices_dict()`); None or {} is
        an empty table (everything costs 0)."""
        data = data or {}
        models = {}
        for name, price in (data.get("models") or {}).items():
            if not isinstance(price, Mapping):
                raise ValueError(f"prices.models.{name}: expected a mapping, got {price!r}")
            models[str(name)] = ModelPrice(
                float(price.get("input_per_mtok", 0.0) or 0.0),
                float(price.get("output_per_mtok", 0.0) or 0.0),
            )
        return cls(
            models,
            float(data.get("embedding_per_mtok", 0.0) or 0.0),
            float(data.get("gpu_hour", 0.0) or 0.0),
        )

    @property
    def has_prices(self) -> bool:
        """Whether any money can come out of this table (else reports fall back to tokens)."""
        return bool(
            self.embedding_per_mtok
            or self.gpu_hour
            or any(p.input_per_mtok or p.output_per_mtok for p in self.models.values())
        )

    def llm_usd(self, model: str, tokens_in: float, tokens_out: float) -> float:
        price = self.models.get(model)
        if price is None:
            return 0.0
        return (tokens_in * price.input_per_mtok + tokens_out * price.output_per_mtok) / _MTOK

    def embed_usd(self, tokens: float) -> float:
        return tokens * self.embedding_per_mtok / _MTOK

    def gpu_usd(self, gpu_s: float) -> float:
        return gpu_s / 3600.0 * self.gpu_hour


def _normalized_stages(stages: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in ("stage_hash", "kind") if c not in stages.columns]
    if missing:
        raise ValueError(f"stages table lacks column(s) {', '.join(missing)}")
    out = stages.copy()
    for column in STAGE_COLUMNS[4:]:
        if column not in out.columns:
            out[column] = 0
        out[column] = pd.to_numeric(out[column], errors="coerce").fillna(0)
    if "model" not in out.columns:
        out["model"] = "none"
    out["model"] = out["model"].fillna("none").astype(str)
    if "role" not in out.columns:  # tables written before stages had a row per role
        out["role"] = ""
    out["role"] = out["role"].fillna("").astype(str)
    # A stage is one row per model and role; a table that repeats one (e.g. concatenated
    # reruns) must not count it twice.
    rows = out.drop_duplicates(["stage_hash", "role", "model"], keep="last")
    return rows.reset_index(drop=True)


def stage_costs(
    stages: pd.DataFrame, prices: PriceTable, held: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per distinct stage: its tokens, time and USD split into LLM, embedding
    and GPU money, its category, and whether its model has a price. `held` (`gpu_time`):
    each model's idle GPU time is charged to its stages (`gpu_idle_s`, priced with
    their serving GPU time; `apportion_idle_gpu`), so a cell's cost includes the GPUs
    it kept idle."""
    out = apportion_idle_gpu(_normalized_stages(stages), held)
    out["category"] = out["kind"].map(lambda k: KIND_CATEGORY.get(str(k), str(k)))
    out["llm_usd"] = [
        prices.llm_usd(m, i, o)
        for m, i, o in zip(out["model"], out["tokens_in"], out["tokens_out"], strict=True)
    ]
    out["embed_usd"] = out["embed_tokens"].map(prices.embed_usd)
    out["gpu_usd"] = (out["gpu_s"] + out["gpu_idle_s"]).map(prices.gpu_usd)
    out["usd"] = out["llm_usd"] + out["embed_usd"] + out["gpu_usd"]
    has_tokens = (out["tokens_in"] + out["tokens_out"]) > 0
    out["priced"] = pd.Series(
        [
            (m in prices.models or m in NO_LLM_MODELS or not used)
            for m, used in zip(out["model"], has_tokens, strict=True)
        ],
        index=out.index,
        dtype=bool,
    )
    return out


def apportion_idle_gpu(stages: pd.DataFrame, held: pd.DataFrame | None) -> pd.DataFrame:
    """`stages` with `gpu_idle_s`: each model's idle GPU-seconds (held, not serving, over
    every invocation of the sweep: `gpu_time`) shared among the stage rows of that
    model in proportion to their serving GPU-seconds (by wall time where none served),
    so the idle GPUs are paid by the cells whose stages held them. A model with no
    stage row keeps its idle time unassigned (the GPU-time table still shows it)."""
    out = stages.copy()
    out["gpu_idle_s"] = 0.0
    if held is None or held.empty or out.empty:
        return out
    idle_h = pd.to_numeric(held["idle_gpu_h"], errors="coerce").fillna(0.0)
    for model, idle in zip(held["model"].astype(str).tolist(), idle_h.tolist(), strict=True):
        idle_s = max(0.0, float(idle)) * 3600.0
        mine = out["model"] == model
        if idle_s <= 0 or not mine.any():
            continue
        weights = out.loc[mine, "gpu_s"].astype(float)
        if weights.sum() <= 0:
            weights = out.loc[mine, "wall_s"].astype(float)
        if weights.sum() <= 0:
            weights = pd.Series(1.0, index=weights.index)
        out.loc[mine, "gpu_idle_s"] = idle_s * weights / weights.sum()
    return out


def _cost_lines(costs: pd.DataFrame) -> pd.DataFrame:
    """Each stage as category lines: its own tokens/time/LLM+GPU money in its kind's
    category, its embedding tokens and money in `embeddings`."""
    own = pd.DataFrame(
        {
            "stage_hash": costs["stage_hash"],
            "category": costs["category"],
            "tokens_in": costs["tokens_in"],
            "tokens_out": costs["tokens_out"],
            "n_llm_calls": costs["n_llm_calls"],
            "embed_tokens": 0,
            "wall_s": costs["wall_s"],
            "gpu_s": costs["gpu_s"],
            "gpu_idle_s": costs["gpu_idle_s"],
            "usd": costs["llm_usd"] + costs["gpu_usd"],
        }
    )
    embedded = costs[costs["embed_tokens"] > 0]
    emb = pd.DataFrame(
        {
            "stage_hash": embedded["stage_hash"],
            "category": EMBEDDINGS,
            "tokens_in": 0,
            "tokens_out": 0,
            "n_llm_calls": 0,
            "embed_tokens": embedded["embed_tokens"],
            "wall_s": 0.0,
            "gpu_s": 0.0,
            "gpu_idle_s": 0.0,
            "usd": embedded["embed_usd"],
        }
    )
    return pd.concat([own, emb], ignore_index=True)


def _by_category(lines: pd.DataFrame) -> pd.DataFrame:
    order = [*CATEGORIES, *sorted(set(lines["category"]) - set(CATEGORIES))]
    grouped = lines.groupby("category")[list(_SUMMED)].sum()
    grouped = grouped.reindex([c for c in order if c in grouped.index])
    total = grouped.sum().to_frame("total").T
    out = pd.concat([grouped, total])
    out.index.name = "category"
    out = out.reset_index()
    for column in ("tokens_in", "tokens_out", "n_llm_calls", "embed_tokens"):
        out[column] = out[column].astype("int64")
    out["tokens"] = out["tokens_in"] + out["tokens_out"] + out["embed_tokens"]
    return out


def cost_breakdown(costs: pd.DataFrame) -> pd.DataFrame:
    """The sweep's spend by category plus a `total` row, each distinct stage once.
    `costs` is `stage_costs(...)`."""
    if costs.empty:
        empty = pd.DataFrame({"category": ["total"], **{c: [0] for c in _SUMMED}})
        empty["tokens"] = 0
        return empty
    return _by_category(_cost_lines(costs))


def point_stages(points: pd.DataFrame) -> pd.DataFrame:
    """(point_id, stage_hash) pairs: every stage a point depends on, its own included.
    The runner lists the point's own stage in `upstream`; a `stage` column, when the
    runner writes one, is added too, so either spelling is enough."""
    rows: list[tuple[Any, str]] = []
    has_stage = "stage" in points.columns
    for row in points.itertuples(index=False):
        hashes = set(_as_list(row.upstream))
        if has_stage and isinstance(row.stage, str) and row.stage:
            hashes.add(row.stage)
        rows.extend((row.point_id, h) for h in sorted(hashes))
    return pd.DataFrame(rows, columns=["point_id", "stage_hash"])


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # a CSV round trip or a hand-written table: "a,b"
        return [v for v in value.split(",") if v]
    try:
        return [str(v) for v in value]
    except TypeError:  # NaN from an outer join
        return []


def point_costs(points: pd.DataFrame, costs: pd.DataFrame) -> pd.DataFrame:
    """One row per point: the sum over the stages it depends on (shared stages in full),
    totals plus `usd_<category>` and `tokens_<category>` columns, and the count of
    upstream stages missing from the stages table (`missing_stages`, 0 when complete)."""
    pairs = point_stages(points)
    known = set(costs["stage_hash"])
    missing = (
        pairs[~pairs["stage_hash"].isin(known)].groupby("point_id").size().rename("missing_stages")
    )
    lines = _cost_lines(costs).merge(pairs, on="stage_hash")
    lines["tokens"] = lines["tokens_in"] + lines["tokens_out"] + lines["embed_tokens"]
    totals = lines.groupby("point_id")[[*_SUMMED, "tokens"]].sum()
    usd = lines.pivot_table(
        index="point_id", columns="category", values="usd", aggfunc="sum", fill_value=0.0
    )
    tokens = lines.pivot_table(
        index="point_id", columns="category", values="tokens", aggfunc="sum", fill_value=0
    )
    out = pd.DataFrame(index=pd.Index(points["point_id"].unique(), name="point_id"))
    out = out.join(totals)
    for category in CATEGORIES:
        out[f"usd_{category}"] = usd[category] if category in usd.columns else 0.0
        out[f"tokens_{category}"] = tokens[category] if category in tokens.columns else 0
    out = out.join(missing).fillna(0)
    for column in ("tokens_in", "tokens_out", "n_llm_calls", "embed_tokens", "tokens"):
        out[column] = out[column].astype("int64")
    out["missing_stages"] = out["missing_stages"].astype("int64")
    return out.reset_index()


def model_costs(costs: pd.DataFrame) -> pd.DataFrame:
    """The sweep's spend per stage kind, role and model (each distinct stage's rows
    once): a stage that calls several models (a brew's student, teacher and curator)
    shows each. `costs` is `stage_costs(...)`."""
    columns = ["kind", "role", "model", *_SUMMED]
    if costs.empty:
        return pd.DataFrame(columns=columns)
    grouped = costs.groupby(["kind", "role", "model"], sort=False)[list(_SUMMED)].sum()
    out = grouped.reset_index()
    for column in ("tokens_in", "tokens_out", "n_llm_calls", "embed_tokens"):
        out[column] = out[column].astype("int64")
    return out[columns]


def unpriced_models(costs: pd.DataFrame) -> list[str]:
    """Models that used tokens but have no price (their money counts as 0)."""
    return sorted(set(costs.loc[~costs["priced"], "model"]))


def gpu_time(location: Location) -> pd.DataFrame:
    """Each model's GPU time over every invocation of the sweep (`gpu_time/*.json`, one
    per invocation: `tracking.results.log_gpu_time`): GPU-hours held (servers up) and
    serving (a request in flight), busy (their ratio) and idle (held, not serving). An
    unreadable record is skipped with a warning; none at all: an empty frame."""
    rows: list[dict[str, Any]] = []
    for target in (location / "gpu_time").listdir(".json"):
        try:
            data = target.read_json()
            for m in data["models"]:
                rows.append(
                    {
                        "model": str(m["model"]),
                        "gpus": float(m["gpus"]),
                        "held_gpu_h": float(m["held_gpu_h"]),
                        "serving_gpu_h": float(m["serving_gpu_h"]),
                    }
                )
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable GPU time record %s (%s)", target, exc)
    columns = ["model", "gpus", "held_gpu_h", "serving_gpu_h", "idle_gpu_h", "busy"]
    if not rows:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(rows).groupby("model", as_index=False, sort=True)
    out = frame.agg(
        gpus=("gpus", "max"),
        held_gpu_h=("held_gpu_h", "sum"),
        serving_gpu_h=("serving_gpu_h", "sum"),
    )
    out["idle_gpu_h"] = out["held_gpu_h"] - out["serving_gpu_h"]
    out["busy"] = out["serving_gpu_h"] / out["held_gpu_h"].where(out["held_gpu_h"] > 0)
    return out[columns]
