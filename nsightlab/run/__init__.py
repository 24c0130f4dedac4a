"""run: producing captures on a GPU machine. Sweeps (TOML or CLI), the workload runner (NVTX ranges around any
callable; torch only at run time), capture with ncu / nsys into the store (light and deep tiers), and the
instruction-class ceiling microbenchmarks.

May import: nsightlab.core, nsightlab.problems, nsightlab.parse, nsightlab.store.
"""
