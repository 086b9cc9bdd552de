"""The always-on GC service (``lakefs-gc serve``): event and inventory ingest, periodic GC cycles.

:mod:`.settings` is its configuration, :mod:`.metrics` its Prometheus metrics and health
endpoints, :mod:`.cycle` one repository's periodic mark and sweep, :mod:`.app` the process
that runs them all as Spark Structured Streaming queries.
"""
