"""analysis: numbers from frames. Counters (FLOPs, bytes, per range), roofline, L2 traffic vs working set, timelines,
option studies, performance ratios, device facts, comparison of captures (verdicts), bottlenecks (stall reasons,
pipes, occupancy limiter, hotspots, the ranked explanation of a gap). Plain functions on DataFrames, no I/O of
their own beyond what the store hands them.

May import: nsightlab.core, nsightlab.problems, nsightlab.parse, nsightlab.store, nsightlab.run.
"""
