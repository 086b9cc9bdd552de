"""Object notifications: S3 event notifications and Azure Event Grid blob events.

:mod:`.model` is the one shape every source is parsed into; the parsers (:mod:`.s3`,
:mod:`.azure`, :mod:`.local`) are pure, the queues (:mod:`.queues`) are the adapters.
"""
