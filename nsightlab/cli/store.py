"""The ``nsightlab store`` command: list, validate and compact the captures under a profile folder, one line
per capture (the work is nsightlab.store.captures': list_captures, validate, compact)."""

from __future__ import annotations

from pathlib import Path

from ..core.args import BAD_INPUT, FAILED, OK, ArgumentParser, print_error
from ..core.errors import ProfileError
from ..store.captures import Capture, compact, list_captures, load_manifest, short_commit, shown_path, validate


def _list_line(c: Capture, open_reports: bool) -> str:
    man = load_manifest(c.path)
    return (f"{c.label:32s} {man.get('created') or '?':16s} commit {short_commit(man.get('git_commit'), 10)}  "
            f"{len(man.get('files', {}))} files  {man.get('timings_seconds', {}).get('total', '?')} s")


def _validate_line(c: Capture, open_reports: bool) -> str:
    validate(c.path, open_reports=open_reports)
    return f"ok       {c.label}"


def _compact_line(c: Capture, open_reports: bool) -> str:
    validate(c.path, open_reports=False)  # compaction rewrites the checksums: the old ones must hold first
    written = compact(c.path)
    validate(c.path, open_reports=open_reports)
    return f"compact  {c.label}: {', '.join(written)}" if written else f"ok       {c.label}"


#: store command -> what it prints for one capture (ProfileError: the capture is invalid)
_COMMANDS = {"list": _list_line, "validate": _validate_line, "compact": _compact_line}
#: store command -> what it does, for --help
VERBS = {
    "list": "one line per capture: <gpu>/<name>, when it was created, its commit, its files, its capture time",
    "validate": "check each capture: its manifest, every file's size and SHA-256 against it, and (unless --no-open) "
                "that every report opens",
    "compact": "store each capture's large exports (over 1 MiB) and any .gz ones xz-compressed, the manifest rewritten "
               "to match (the uncompressed size and SHA-256 are kept); a capture already compact is left as it is",
}


def main(argv: list[str] | None = None, prog: str = "nsightlab store") -> int:
    verbs = "\n".join(f"  {name:9s} {text}" for name, text in VERBS.items())
    p = ArgumentParser(prog=prog, description=f"List, validate and compact the captures under a profile folder.\n\n"
                       f"verbs:\n{verbs}",
                       epilog="A capture is a folder <ROOT>/<gpu>/<name>/ with its manifest.json; folders whose name "
                              "starts with . or _ (backups, temporary and failed captures) are left out.\n\n"
                              "exit status: 0 every capture listed / valid / compacted, 1 some capture is invalid "
                              "(each says why), 2 bad input (ROOT missing, a file, or holding no capture)")
    p.add_argument("command", choices=tuple(_COMMANDS), metavar="VERB", help=f"one of {', '.join(_COMMANDS)} (above)")
    p.add_argument("root", nargs="?", default="profiles", metavar="ROOT", help="the profile folder")
    p.add_argument("--no-open", action="store_true", help="validate, compact: check sizes and checksums only, do "
                                                          "not open the reports")
    a = p.parse_args(argv)
    skipped: list[str] = []
    try:
        caps = list_captures(Path(a.root), skipped)
    except ProfileError as exc:
        print_error(prog, str(exc))
        return BAD_INPUT
    for line in skipped:
        print_error(prog, line)
    if not caps:
        print_error(prog, f"no capture under {shown_path(a.root)}{' readable' if skipped else ''}; a capture is a "
                          "folder <gpu>/<name>/ with its manifest.json, as nsightlab capture and import write it")
        return BAD_INPUT
    bad = len(skipped)
    for c in caps:
        try:
            print(_COMMANDS[a.command](c, not a.no_open))
        except ProfileError as exc:
            bad += 1
            print(f"{c.label:32s} INVALID: {exc}" if a.command == "list" else f"INVALID  {exc}")
    return FAILED if bad else OK
