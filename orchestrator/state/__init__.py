"""What lies under the output root: the checksummed ledger of stages, episodes and banks, the
run locks, outcome-driven stages' journals, the sweep tables and where each bank came from.
"""
