"""`benchmark=humaneval`: OpenAI's HumanEval (Chen et al., 2021)."""
