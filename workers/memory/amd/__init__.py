"""AMD, the memory method: Workflow, Subtask and Function memory distilled from a
teacher's successful trajectories (the paper, section 3.2 and appendix C:
../shared/papers/amd-paper-full-text.txt from the repository root).

- `records`: the entries (`WorkflowMemory`, `SubtaskSegment`, `FunctionRecord`) and
  their provenance (`MemorySource`).
- `masking`: typed placeholders for the concrete values of the teacher's calls.
- `prompts`: the builder prompts (part of the build stage's identity).
- `trajectory`: a successful episode prepared for the builders, shared helpers.
- `llm`: prompt -> validated value, one retry, counted in `BuildStats`.
- `workflow`, `subtask`, `function`: one builder per memory type.
- `render`: the `text` representation of Subtask and Function entries.
- `bank`: one bank from trajectories (`build_bank`) and its identity (`bank_id_for`).
- `lookup`: Workflow, Subtask and Function retrieval over one bank (`MemoryRetriever`).
- `method`: AMD and student memory as `MemoryMethod`s (what the orchestrator sees).
- `hooks`: the AMD student (Algorithm 1) as episode hooks (`AmdHooks`).

Nothing is imported here, so a generic module may import `amd.records` alone.
"""
