"""Amazon S3 Inventory: find, verify and read deliveries; write deliveries for tests and ``generate``.

Everything works on a :class:`pyarrow.fs.FileSystem` and paths inside it, so the same code runs
on local disk, S3 (``bucket/key`` paths) or Azure (``container/blob`` paths).

``manifest`` knows the delivery layout, finds deliveries and verifies their manifests; ``reader``
turns verified data files (CSV, Parquet, ORC) into :data:`~lakefs_gc.inventory.delivery.INVENTORY_SCHEMA`
rows; ``writer`` writes deliveries the way S3 does. ``columns`` maps S3's column spellings.
"""

from lakefs_gc.inventory.s3.manifest import CHECKSUM, MANIFEST, discover, load_manifest
from lakefs_gc.inventory.s3.reader import read_data_file
from lakefs_gc.inventory.s3.writer import write_delivery

__all__ = ["CHECKSUM", "MANIFEST", "discover", "load_manifest", "read_data_file", "write_delivery"]
