"""What a stage is: its identity and key (hashed, so sweeps share and resume work), the Stage
contract every kind implements (run, status, progress, costs) and the registry of kinds by name.
"""

from distillery.orchestrator.stages.stage import (
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
    digest_of,
    effective_seed,
    model_identity,
)

# Plugins imported these from distillery.orchestrator.stages (a module until issue 32).
__all__ = [
    "BankSource",
    "BankStage",
    "BuildStage",
    "CollectStage",
    "CostRow",
    "EpisodeStage",
    "EvaluateStage",
    "MemoryRead",
    "RenderStage",
    "Stage",
    "StageFigure",
    "StageKey",
    "StageReport",
    "StageStatus",
    "digest_of",
    "effective_seed",
    "model_identity",
]
