"""render: what a person sees. figures (plotly, one colour per implementation, everywhere), numbers (how a
value is written on a page), page (what the notebooks share: parameters, tables, summaries), execute (a
notebook run into an HTML page by papermill and nbconvert), report (every page of every capture, the index),
compare (the comparison page, the comparisons a profiles folder declares),
documents (the files plug-ins render from a profiles folder, such as a study's results page). The ``report`` and
``compare`` commands (options, what they print) are nsightlab.cli's.

May import: nsightlab.core, nsightlab.problems, nsightlab.parse, nsightlab.store, nsightlab.run, nsightlab.analysis.
"""
