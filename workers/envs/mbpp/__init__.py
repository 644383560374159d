"""`benchmark=mbpp`: Mostly Basic Python Problems (sanitized) and MBPP+ (EvalPlus)."""
