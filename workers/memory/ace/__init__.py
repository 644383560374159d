"""ACE (Zhang et al., 2025, "Agentic Context Engineering") with the teacher as the
adapting agent: on the memory split, a playbook of itemized bullets is grown task by
task by the generator–reflector–curator loop (offline adaptation; the environment's
binary verdict, no ground truth), with incremental delta updates (ADD operations and
helpful/harmful counts) and, optionally, semantic de-duplication; at test time the
whole playbook is given to the student. `stage.AceStage` adapts (an outcome-driven
stage); `method.Ace` is the `MemoryMethod`."""
