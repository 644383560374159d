"""What a stage is: its identity and key (hashed, so sweeps share and resume work), the Stage
contract every kind implements (run, status, progress, costs) and the registry of kinds by name.
"""
