"""Pure GC rules: the centre every adapter and engine depends on, depending on nothing.

``cutoff`` (invariant 2), ``addresses`` (what may ever be deleted, invariant 3), ``algebra`` and
``candidate_set`` (the executable specifications the Spark code is tested against), ``guards``
(the sweep's safety rails), ``reports`` (summary.json written and read back, typed), ``reasons``,
``params`` (what a mark and a sweep are asked to do) and ``ports`` (what they need from the
world: lakeFS, deleters, a clock).

Nothing here imports Spark, pyarrow, a cloud SDK or lakefs-sdk (an import-linter contract in
``pyproject.toml`` checks it), so every safety rule is unit- and property-tested in isolation and
shared by the batch jobs, the service and the reference models. Invariants: docs/invariants.md.
"""
