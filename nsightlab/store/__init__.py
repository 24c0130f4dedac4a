"""store: capture folders. The manifest (one schema, one writer), listing and validating captures, reading a capture
back into frames, and importing reports that anyone captured into the same folder shape.

May import: nsightlab.core, nsightlab.problems, nsightlab.parse.
"""
