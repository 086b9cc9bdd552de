"""Inventory deliveries into the candidate table: :mod:`.source` (the streaming source),
:mod:`.parts` (one parquet part per data file, written by the source's tasks), :mod:`.table` (the
table, its sink and readers) and :mod:`.stream` (the query, run ``availableNow`` or continuously)."""
