"""analysis: numbers from frames. Counters (FLOPs, bytes, per range), roofline, L2 traffic vs working set, timelines,
option studies, performance ratios, device facts, comparison of captures (verdicts), bottlenecks (stall reasons,
pipes, occupancy limiter, hotspots, the ranked explanation of a gap), the why page's and command's choice of
sides (why). Plain functions on DataFrames and loaded reports: no argument parsing, no printing (the commands'
text is nsightlab.cli's), no git (source text comes through nsightlab.core.sources), no finding of reports
(nsightlab.store.find); the metric names they read are nsightlab.core.metrics'. (comparison.load still opens a
capture through the store's readers for the comparison.)

May import: nsightlab.core, nsightlab.problems, nsightlab.parse, nsightlab.store, nsightlab.run.
"""
