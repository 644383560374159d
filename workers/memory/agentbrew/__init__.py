"""AgentBrew: failure-triggered, student-aware teacher notes certified by re-playing the
student (the Ralph loop), curated into skill-scoped, append-only memory, served frozen
(method.py; docs/methods/agentbrew.md)."""
