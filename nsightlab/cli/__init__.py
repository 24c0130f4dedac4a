"""cli: the ``nsightlab`` command, one subcommand per job, as the Nsight tools have, and every subcommand's
argument parser, ``main(argv, prog)`` and terminal text. One module per subcommand:

    nsightlab capture ...   run a sweep under ncu / nsys into a capture folder      (nsightlab.cli.capture)
    nsightlab import ...    bring reports captured anywhere into the same shape     (nsightlab.cli.import_)
    nsightlab report ...    render the HTML reports from the captures               (nsightlab.cli.report)
    nsightlab compare ...   compare two captures, range by range                    (nsightlab.cli.compare)
    nsightlab why ...       why one kernel is slower than another, from its counters (nsightlab.cli.why)
    nsightlab store ...     list, validate and compact captures                     (nsightlab.cli.store)
    nsightlab hang ...      which Nsight Compute sections a kernel stalls under      (nsightlab.cli.hang)
    nsightlab cache ...     where the cache of uncompressed exports is, its size; clear it (nsightlab.cli.cache)

This layer owns the arguments (options, help text, exit statuses, the one-line errors of nsightlab.core.args)
and what a command prints; the work itself is the library's (run, store, analysis, render, core), plain
functions that these modules call and whose results they format.

``nsightlab SUBCOMMAND --help`` documents each; ``python -m nsightlab.SUBCOMMAND`` is the same command,
the installed ``nsightlab`` script included: both find a user's own modules (``--impl module:callable``,
a sweep file's implementations, ``--plugin``) in the current folder.

May import: every other stage.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

# subcommand -> (module with main(argv) -> int, one line for --help)
COMMANDS: dict[str, tuple[str, str]] = {
    "capture": ("nsightlab.cli.capture", "run a sweep under ncu / nsys into a capture folder"),
    "import": ("nsightlab.cli.import_", "bring .ncu-rep / .nsys-rep / .sqlite reports captured anywhere into a capture folder"),
    "report": ("nsightlab.cli.report", "render the HTML reports from the captures"),
    "compare": ("nsightlab.cli.compare", "compare two captures range by range, with verdicts"),
    "why": ("nsightlab.cli.why", "explain why one kernel is slower than another (ranked table from Nsight's sections)"),
    "store": ("nsightlab.cli.store", "list, validate and compact (xz) capture folders"),
    "hang": ("nsightlab.cli.hang", "which Nsight Compute sections keep a kernel from finishing (bisects the deep tier's)"),
    "cache": ("nsightlab.cli.cache", "where the cache of uncompressed exports and parsed deep reports is and its "
                                   "size (info), or empty it (clear)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: nsightlab SUBCOMMAND [ARGS...]", "", "subcommands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "nsightlab SUBCOMMAND --help for each one's arguments."]
    return "\n".join(lines)


def as_command() -> None:
    """What a command run from a shell needs, whether it started as the installed ``nsightlab`` script or as
    ``python -m nsightlab...``: the current folder first on ``sys.path``, as ``python -m`` puts it (a console
    script puts its own bin folder there instead, and ``--impl mypkg.attn:fn`` would not import; not under
    ``python -P`` / ``$PYTHONSAFEPATH``, which ``python -m`` honours too), and output into a closed pipe
    (``nsightlab store list | head``) ending quietly rather than with a BrokenPipeError."""
    cwd = os.getcwd()
    if not sys.flags.safe_path and not any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
        sys.path.insert(0, cwd)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    """The ``nsightlab`` command: ``argv`` (default ``sys.argv[1:]``, as the installed script calls it)
    is a subcommand and its arguments; returns the exit status."""
    if argv is None:
        as_command()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"nsightlab: unknown subcommand {name!r}; choose one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest, prog=f"nsightlab {name}") or 0)


def run_as(name: str) -> None:
    """``python -m nsightlab.NAME ...`` is ``nsightlab NAME ...``."""
    as_command()
    raise SystemExit(main([name, *sys.argv[1:]]))

