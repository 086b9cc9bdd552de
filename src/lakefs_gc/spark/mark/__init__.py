"""The mark on Spark: :mod:`.job` (``mark_run``), :mod:`.algebra` (the set algebra of
:mod:`lakefs_gc.gc.algebra` as joins), :mod:`.references` (what lakeFS references: ranges read on
the executors, staged addresses), :mod:`.range_cache` and :mod:`.sources` (where candidates come from)."""
