"""The argument parser of every nsightlab command: a bad argument is one line, not the usage block.

    nsightlab capture: error: argument --pass: expected one argument (see nsightlab capture --help)

``--help`` still prints the whole usage and every argument.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


def error_line(prog: str, message: str) -> str:
    """``prog: error: message (see prog --help)``: how every command says that its arguments are wrong."""
    return f"{prog}: error: {message} (see {prog} --help)"


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose :meth:`error` prints one line (:func:`error_line`) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, error_line(self.prog, message) + "\n")
