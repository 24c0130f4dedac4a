"""run: producing captures on a GPU machine. Sweeps (TOML or CLI), the workload runner (NVTX ranges around any
callable; torch only at run time), capture with ncu / nsys into the store (light and deep tiers, one GPU or many),
the bisection of the sections a kernel stalls under (hang), and the instruction-class ceiling microbenchmarks.
The ``capture`` and ``hang`` commands (options, what they print) are nsightlab.cli's.

May import: nsightlab.core, nsightlab.problems, nsightlab.parse, nsightlab.store.
"""
