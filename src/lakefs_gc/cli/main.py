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
from lakefs_gc.cli import backup, demo, gc, inventory, serve, sstable, test_server
from lakefs_gc.errors import GcError

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
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lakefs-gc {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    demo.register(commands)
    gc.register(commands)
    serve.register(commands)
    backup.register(commands)
    inventory.register(commands)
    sstable.register(commands)
    test_server.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
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
    except KeyboardInterrupt:
        print("lakefs-gc: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
