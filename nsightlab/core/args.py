"""The argument parser of every nsightlab command, and how every command says that something went wrong:
one line, not the usage block or a traceback.

    nsightlab capture: error: argument --pass: expected one argument (see nsightlab capture --help)
    nsightlab import: error: profiles/nvidia-h200/run already exists; ...

A bad argument ends with ``(see PROG --help)`` (:func:`error_line`); a failure that is not about the
arguments (a file that does not open, a folder that cannot be written, a step that failed) is the same
line without it (:func:`print_error`). ``--help`` still prints the whole usage and every argument, with
each option's default (:class:`HelpFormatter`).

Exit statuses, the same in every command: 0 done, 1 a step failed (a capture, a page, an invalid capture
among several; for ``compare``, a regression), 2 bad input (arguments, files, folders), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

#: the exit statuses every command documents in its --help (:data:`EXIT_STATUS`)
OK, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130
#: the --help epilog line that says them; a command with other meanings writes its own
EXIT_STATUS = "exit status: 0 done, 1 a step failed, 2 bad input (arguments, files, folders), 130 interrupted"
#: the largest integer a count or shape flag takes: CUDA's grid dimension limit and a 32-bit index
MAX_INT = 2**31 - 1


def error_line(prog: str, message: str) -> str:
    """``prog: error: message (see prog --help)``: how every command says that its arguments are wrong."""
    return f"{prog}: error: {one_line(message)} (see {prog} --help)"


def one_line(message: str) -> str:
    """``message`` with every run of whitespace (newlines included) as one space."""
    return " ".join(str(message).split())


def print_error(prog: str, message: str, *, see_help: bool = False) -> None:
    """Print ``prog: error: message`` (one line; with ``see_help``, :func:`error_line`'s pointer to --help)
    to stderr: how every command says that an input is bad or a step failed, not only its arguments."""
    print(error_line(prog, message) if see_help else f"{prog}: error: {one_line(message)}", file=sys.stderr, flush=True)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written (their line breaks kept), and every option's default after its
    help, as ``(default: X)``, unless the help already says its default or there is none to say (None,
    False, an empty string or list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text.lower() or default is None or default is False or default in ("", [])
                or default is argparse.SUPPRESS
                or not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose :meth:`error` prints one line (:func:`error_line`) and exits 2;
    its help shows every default (:class:`HelpFormatter`) unless another ``formatter_class`` is given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, error_line(self.prog, message) + "\n")


def _integer(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes {what}, not {text!r}") from None
    if not least <= value <= MAX_INT:
        raise argparse.ArgumentTypeError(f"takes {what} up to {MAX_INT}, not {text}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type`` of a count that must be at least 1 (and at most :data:`MAX_INT`)."""
    return _integer(text, 1, "a whole number of at least 1")


def non_negative_int(text: str) -> int:
    """argparse ``type`` of a count that may be 0 (and at most :data:`MAX_INT`)."""
    return _integer(text, 0, "a whole number of at least 0")


def _real(text: str, positive: bool) -> float:
    what = "a number greater than 0" if positive else "a number of at least 0"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes {what}, not {text!r}") from None
    if not (value > 0 if positive else value >= 0) or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"takes {what} (and finite), not {text}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type`` of a finite number greater than 0 (seconds, sizes)."""
    return _real(text, True)


def non_negative_float(text: str) -> float:
    """argparse ``type`` of a finite number of at least 0 (a threshold that 0 turns off)."""
    return _real(text, False)
