"""parse: Nsight's files -> tidy pandas frames. Nsight Compute reports (.ncu-rep) and raw CSV exports, Nsight Systems
SQLite exports; every kernel keeps its raw NVTX range name and domain, decoded where a range schema matches.

May import: nsightlab.core.
"""
