"""Grading of math answers, shared by `gsm8k` and `math`: the Qwen2.5-Math evaluator's
answer extraction (`answers.py`) and symbolic equivalence by math-verify, in separate
processes with an outer wall-clock limit (`grader.py`, `server.py`)."""
