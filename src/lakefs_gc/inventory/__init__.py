"""Cloud inventory deliveries (S3 Inventory, Azure Blob Inventory) as the candidate source.

``delivery`` holds the flavour-neutral model; ``s3`` and ``azure`` find, verify and read each
cloud's deliveries into :data:`~lakefs_gc.inventory.delivery.INVENTORY_SCHEMA` rows.
"""
