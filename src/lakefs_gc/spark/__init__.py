"""Spark glue, one package per phase (like Nessie's ``identify/`` and ``expire/``).

* :mod:`.runtime`: the session (JVM, Python, logging), checkpoints, executor failures, table locations;
* :mod:`.report`: a mark's reports on storage: layout, writing, reading back, the ``swept/`` log;
* :mod:`.mark`: the mark job, its set algebra on DataFrames, the references (ranges, staged
  addresses), the range cache and the candidate sources (listing, inventory, candidate set);
* :mod:`.sweep`: the sweep job, its plan (guards, revalidation), the per-task deletes, resumption,
  progress, and backup/restore of a mark's objects;
* :mod:`.ingest`: the streaming sources and tables of the service (inventory deliveries, events).

Pure rules are not here but in :mod:`lakefs_gc.gc`; the jobs take their parameters and ports
from there and are tested against its executable specifications. Architecture: docs/architecture.md.
"""
