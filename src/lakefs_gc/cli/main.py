"""The ``lakefs-gc`` command: sub-commands register themselves on one argparse parser.

Every :class:`~lakefs_gc.errors.GcError` is printed as one line on stderr, without a
traceback, and the process exits with that error's ``exit_code`` so scripts can tell a bad
configuration from a corrupt file or an unreachable lakeFS.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from lakefs_gc import __version__
from lakefs_gc.cli import backup, demo, explain, gc, inventory, serve, sstable, test_server
from lakefs_gc.cli.exits import MEANING, exit_status_help
from lakefs_gc.errors import ExitCode, GcError

#: set to print the traceback of an error (for bug reports)
TRACEBACK_ENV = "LAKEFS_GC_TRACEBACK"

Handler = Callable[[argparse.Namespace], int]

DESCRIPTION = """\
lakefs-gc collects garbage in lakeFS repositories: objects in a repository's storage
namespace that no retained commit and no branch's staging area references any more.

Safety first: it never deletes objects referenced by active commits or staged on any branch,
nothing newer than the cutoff (now - max(--min-age, lakeFS's grace period)), nothing outside
the storage namespace or under _lakefs/, and it aborts on any incomplete input.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakefs-gc",
        description=DESCRIPTION,
        epilog=exit_status_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lakefs-gc {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    demo.register(commands)
    gc.register(commands)
    explain.register(commands)
    serve.register(commands)
    backup.register(commands)
    inventory.register(commands)
    sstable.register(commands)
    test_server.register(commands)
    return parser


def exit_status_table() -> str:
    """Every exit status and what it means (the README's table)."""
    return exit_status_help(*MEANING) + "\n`lakefs-gc COMMAND --help` explains each command."


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (see :class:`~lakefs_gc.errors.ExitCode`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help/--version (0) or a usage error (2), already printed by argparse
        return e.code if isinstance(e.code, int) else ExitCode.USAGE
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    try:
        return handler(args)
    except GcError as e:
        if os.environ.get(TRACEBACK_ENV):
            traceback.print_exc()
        print(f"lakefs-gc: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # `lakefs-gc sstable dump big.sst | head` is normal use, not an error.
        sys.stderr.close()
        return 0
    except Exception:  # a bug: say so, with what a report needs
        traceback.print_exc()
        print(
            "lakefs-gc: unexpected error (a bug): please report it with the traceback above", file=sys.stderr
        )
        return ExitCode.INTERNAL
    except KeyboardInterrupt:
        print("lakefs-gc: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
