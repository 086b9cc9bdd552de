"""Azure Blob Storage inventory: find, verify and read deliveries; write them for tests.

All functions take a :class:`pyarrow.fs.FileSystem` and paths inside it, so they run on local disk and
on Azure alike. ``manifest`` knows the delivery layout, finds deliveries and verifies their manifests;
``reader`` checks and reads data files into :data:`~lakefs_gc.inventory.delivery.INVENTORY_SCHEMA`
rows; ``writer`` writes deliveries the way Azure does. ``fields`` knows Azure's field spellings.
"""

from lakefs_gc.inventory.azure.manifest import discover, load_manifest
from lakefs_gc.inventory.azure.reader import read_data_file, verify_delivery
from lakefs_gc.inventory.azure.writer import write_delivery

__all__ = ["discover", "load_manifest", "read_data_file", "verify_delivery", "write_delivery"]
