"""The service's streaming ingest: :mod:`.inventory` (deliveries into the candidate table, exactly
once) and :mod:`.events` (queue notifications into the event table, spooled so batches replay)."""
