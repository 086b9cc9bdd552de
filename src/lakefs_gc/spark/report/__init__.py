"""A mark's reports on storage, in lakeFS's layout: :mod:`.layout` (names, schemas, the report
directory), :mod:`.write`, :mod:`.read` (the summary typed, the marked addresses as DataFrames) and
:mod:`.swept` (the sweep's outcome log, written in small whole parts so that a sweep resumes)."""
