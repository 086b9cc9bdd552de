"""Spark glue: session construction, Python data sources and DataFrame transforms."""
