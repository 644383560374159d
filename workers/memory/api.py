"""What a memory method of another package may use: the protocol and its base class,
the planner it asks for its bank's stage, the entries and bank it writes, and the
helpers the project's own methods share (proactive hooks, the isolation audit, the
builders' validated LLM client). Import from here: these names are kept stable.
"""

from __future__ import annotations

from distillery.workers.memory.audit import allowed_hits, audit_log
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.building import BuilderLLM, BuildStats, LLMClient
from distillery.workers.memory.entries import CollectionSpec, MemoryEntry, MemorySource
from distillery.workers.memory.isolation import Hit
from distillery.workers.memory.method import (
    BankPlanner,
    BaseMemoryMethod,
    MemoryMethod,
    NoBankMethod,
    StudentRunsMethod,
    own_settings,
    summed_counters,
)
from distillery.workers.memory.proactive import ProactiveOnly

__all__ = [
    "BankPlanner",
    "BaseMemoryMethod",
    "BuildStats",
    "BuilderLLM",
    "BuiltBank",
    "CollectionSpec",
    "Hit",
    "LLMClient",
    "MemoryEntry",
    "MemoryMethod",
    "MemorySource",
    "NoBankMethod",
    "ProactiveOnly",
    "StudentRunsMethod",
    "allowed_hits",
    "audit_log",
    "own_settings",
    "summed_counters",
]
