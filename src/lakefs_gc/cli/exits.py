"""The exit statuses as the help texts and the README show them: one short meaning per code.

:class:`~lakefs_gc.errors.ExitCode` is the one list; every command's ``--help`` names the codes
it can end with, from here, so the help, the README's table and the code cannot drift apart
(``tests/cli/test_exit_codes.py`` checks the README against this table row by row).
"""

from __future__ import annotations

from lakefs_gc.errors import ExitCode

#: what each exit status means, in the words of the README's table
MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "ok",
    ExitCode.INTERNAL: "unexpected error, a bug: the traceback is printed; please report it",
    ExitCode.USAGE: "wrong command line (unknown flag, missing argument, no command)",
    ExitCode.SETTINGS: (
        "bad settings or arguments (config file, flags, environment, unknown mark id), "
        "or a service state of a newer layout"
    ),
    ExitCode.LAKEFS: "lakeFS error or unreachable (after retries)",
    ExitCode.EXPORT: "a lakeFS export or a mark report is missing or unreadable",
    ExitCode.STORAGE: "object store error or unreachable",
    ExitCode.INVENTORY: "no usable inventory delivery, or a delivery was rejected",
    ExitCode.CORRUPT_RANGE: "corrupt range or metarange file (SSTable)",
    ExitCode.PARTIAL: "finished, but some objects failed (see the report: swept/, backup/, restore/)",
    ExitCode.REFUSED: "refused by a safety guard (failed or stale mark, too large a sweep): nothing deleted",
    ExitCode.CHECK_FAILED: "the demo's check failed: the GC did not do what the demo expects",
    ExitCode.SPARK: "Spark failed (a job, or a streaming query of the service)",
    ExitCode.STATE_IN_USE: "another service holds the lease on the same service state (`serve`)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}

#: what every command can end with, whatever it does
COMMON = (ExitCode.OK, ExitCode.INTERNAL, ExitCode.USAGE, ExitCode.SETTINGS, ExitCode.INTERRUPTED)


def exit_status_help(*codes: ExitCode) -> str:
    """The ``exit status:`` block of a command's epilog: the codes it can end with, one per line."""
    chosen = sorted(set(codes) | set(COMMON))
    return "exit status:\n" + "\n".join(f"  {int(c):>3}  {MEANING[c]}" for c in chosen) + "\n"
