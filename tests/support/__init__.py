"""The test kit: what only the tests and the benchmarks use, kept out of the shipped package.

``servers`` (moto and Azurite on 127.0.0.1), ``object_stores`` (their pytest fixtures and clients),
``throttling`` (a proxy that makes moto answer SlowDown), ``eventgrid`` (a fake Event Grid
namespace), ``rocksdb`` (RocksDB's ``sst_dump`` as an independent reader). The shipped
:mod:`lakefs_gc.testing` keeps what ``lakefs-gc demo``, ``serve`` and ``test-server`` need.
"""
