"""store: capture folders. The manifest (one schema, one writer), listing, validating and compacting captures
(captures), reading a capture back into frames (read), finding a capture's reports for the why command and page
(find: the deep report and the range schemas that decode it, the capture's commit and tag), and importing
reports that anyone captured into the same folder shape (importer). The ``store`` and ``import`` commands are
nsightlab.cli's.

May import: nsightlab.core, nsightlab.problems, nsightlab.parse.
"""
