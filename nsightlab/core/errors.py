"""The errors nsightlab raises on purpose: each message says what was wrong and what is accepted."""

from __future__ import annotations


class ProfileError(ValueError):
    """A capture folder or Nsight export that is missing, incomplete or corrupt (the message says which and how)."""


class ToolError(RuntimeError):
    """An Nsight tool that cannot be found or cannot run here (the message says what to install or set)."""


class CaptureError(RuntimeError):
    """A capture step failed; the message names the step and where its log and partial output are."""


class NotApplicable(ValueError):
    """The input lacks what an analysis or a page needs; the message says what is missing (metric names,
    ranges, a work model, a file ...). Notebooks print it on the page instead of drawing an empty chart."""
