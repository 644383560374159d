"""Running the stage graph: the sweep, episode dispatch and worker pools, model servers, memory
and outcome-driven (ordered) stages, what observes a run (observers, heartbeat) and its metrics.
"""
