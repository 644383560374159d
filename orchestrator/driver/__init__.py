"""The driver: configs -> a planned, locked, executed and tracked sweep (run_sweep), the one
function the command line, bench/ and the tests call; above tracking, which it drives.
"""
