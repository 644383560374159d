"""What a run records: MLflow's parent and child runs (Tracker), episode traces, links to the UI,
live and stage runs, and the results and tables each evaluation point leaves for the report.
"""
