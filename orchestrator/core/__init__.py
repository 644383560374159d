"""What every package of the orchestrator may use: the typed run config, evaluation protocols,
the error a user can fix, small statistics (and, with the cli split, Hydra composition).
"""
