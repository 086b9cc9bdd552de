"""Command-line interface: thin wiring from arguments to library calls."""
