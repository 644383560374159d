"""What a stage is: its identity and key (hashed, so sweeps share and resume work), the Stage
contract every kind implements (run, status, progress, costs) and the registry of kinds by name.
"""

from distillery.orchestrator.stages.kinds import STAGE_KINDS, stage_type
from distillery.orchestrator.stages.stage import (
    RUNTIME_MODEL_FIELDS,
    BankSource,
    BankStage,
    BuildStage,
    CollectStage,
    CostRow,
    EpisodeStage,
    EvaluateStage,
    MemoryRead,
    RenderStage,
    Stage,
    StageFigure,
    StageKey,
    StageReport,
    StageStatus,
    agent_prompt_fingerprint,
    digest_of,
    effective_seed,
    model_identity,
)

# Plugins imported these from distillery.orchestrator.stages (a module until issue 32); both
# modules are cheap (stage.py imports nothing of the orchestrator at runtime), so no laziness.
__all__ = [
    "BankSource",
    "BankStage",
    "BuildStage",
    "CollectStage",
    "CostRow",
    "EpisodeStage",
    "EvaluateStage",
    "MemoryRead",
    "RUNTIME_MODEL_FIELDS",
    "RenderStage",
    "STAGE_KINDS",
    "Stage",
    "StageFigure",
    "StageKey",
    "StageReport",
    "StageStatus",
    "agent_prompt_fingerprint",
    "digest_of",
    "effective_seed",
    "model_identity",
    "stage_type",
]
