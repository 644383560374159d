"""Reflexion (Shinn et al., 2023) as a test-time protocol: the student plays a task,
learns the environment's verdict, reflects on its failed attempt in words, and plays
the same task again with its reflections in the prompt, up to k plays; the task counts
as solved if any play succeeds (the AgentBrew paper's Group II). No bank: reflections
are staged for the task's own re-plays only (`stage.ReflexionStage`, an outcome-driven
stage on the evaluated split); `method.Reflexion` is the `MemoryMethod`."""
