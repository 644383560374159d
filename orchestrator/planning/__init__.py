"""Whether a sweep can run and what it will cost, before anything starts: the stage graph (plan),
its --plan check and totals, pre-flight and readiness checks, requirements, point descriptors.
"""
