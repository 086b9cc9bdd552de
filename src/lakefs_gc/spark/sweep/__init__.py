"""The sweep on Spark: :mod:`.job` (``sweep_run``), :mod:`.plan` (the guards of
:mod:`lakefs_gc.gc.guards` around :mod:`.revalidate`), :mod:`.partition` (one task's bulk deletes),
:mod:`.resume`, :mod:`.progress`, and :mod:`.backup` (a mark's objects copied away and back)."""
