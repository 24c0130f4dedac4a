"""The ``nsightlab import`` command: Nsight reports captured anywhere into a capture folder of the profile
store (the work is nsightlab.store.importer's; its docstring is the command's description)."""

from __future__ import annotations

import os
import sys

from ..core import tools
from ..core.args import BAD_INPUT, ArgumentParser, positive_int, print_error
from ..core.errors import ProfileError
from ..core.errors import ToolError as _ToolError
from ..core.text import plural
from ..problems.impls import load_plugins
from ..store import importer
from ..store.captures import load_manifest


def main(argv: list[str] | None = None, prog: str = "nsightlab import") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = ArgumentParser(prog=prog, description=importer.__doc__,
                       epilog="exit status: 0 imported, 2 bad input (a report that does not open, a bad name, a "
                              "capture of that name that exists without --replace, a folder that cannot be written)")
    p.add_argument("reports", nargs="+", metavar="REPORT",
                   help=f"reports to import ({', '.join(importer.ACCEPTED)}), or folders: every report in them, read in "
                        "parallel")
    p.add_argument("--jobs", "-j", type=positive_int, default=os.cpu_count() or 1,
                   help="reports read at once (Dask worker processes) when there are several (default: the machine's "
                        "cores)")
    p.add_argument("--profiles", default="profiles", help="profile store root (default: profiles)")
    p.add_argument("--name", help="capture name (default: the first report's file name without its suffix)")
    p.add_argument("--replace", action="store_true",
                   help="replace a capture of that name on that GPU (without it the import refuses and changes "
                        "nothing); the old one is moved to <profiles>/<gpu>/.replaced-<name>-<time>/ and removed "
                        "once the new one is complete and in place")
    p.add_argument("--description", help="one line saying what was captured (default: the imported file names)")
    p.add_argument("--nsys", help="path to nsys, to export a .nsys-rep (else $NSYS, PATH, standard folders)")
    p.add_argument("--plugin", action="append", default=[],
                   help="a module whose range schemas decode the reports' range names (installed plug-ins are loaded too)")
    a = p.parse_args(argv)
    try:
        load_plugins(a.plugin)
    except ValueError as exc:
        p.error(str(exc))
    try:
        dest = importer.import_reports(a.reports, a.profiles, a.name, a.nsys, description=a.description, argv=argv,
                                       replace=a.replace, jobs=a.jobs, plugins=a.plugin)
    except (ProfileError, tools.ToolError, _ToolError, OSError) as exc:
        print_error(prog, str(exc))
        return BAD_INPUT
    man = load_manifest(dest)
    print(f"imported {plural(len(man['imported_from']), 'report')} from {man['gpu']['name']} into {dest} "
          f"({', '.join(man['tools'])}; {plural(len(man['files']), 'file')})")
    return 0
