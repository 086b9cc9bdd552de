"""Object notifications into the event table: :mod:`.source` (the streaming source over a queue,
with its spool) and :mod:`.table` (the table, its idempotent sink, readers and the query)."""
