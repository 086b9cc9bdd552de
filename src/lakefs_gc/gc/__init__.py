"""Pure GC logic: cutoff policy, candidate algebra, address safety, reports.

Nothing here imports Spark or a cloud SDK, so every safety rule is unit- and property-tested
in isolation and shared by the batch jobs, the streaming service and the reference models.
"""
