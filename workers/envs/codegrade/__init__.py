"""Grading of model-written code, shared by `mbpp` (and MBPP+) and `humaneval`: the
code a reply holds (`extract.py`, EvalPlus's sanitizer), the checks run in the sandbox
(`checks.py`: MBPP's asserts, HumanEval's `check`, EvalPlus's differential tests) and
EvalPlus's output comparison (`evalplus.py`)."""
