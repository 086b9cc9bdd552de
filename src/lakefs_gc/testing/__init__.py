"""A lakeFS-compatible test server and synthetic repositories (tests, demo, benchmarks)."""
