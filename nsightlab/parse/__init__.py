"""parse: Nsight's files -> tidy pandas frames. ``ncu`` reads Nsight Compute reports (.ncu-rep) and raw CSV
exports, ``ncu_session`` what a report says about the session that wrote it, ``nsys`` Nsight Systems SQLite
exports; ``range_columns`` gives every kernel row its raw NVTX range name and domain, decoded where a range
schema matches; ``deep`` what a deep report's sections say; ``isolated`` runs the report readers in a
process of their own (ncu-report keeps what it read until its process ends). Files may be stored xz- or
gzip-compressed.

May import: nsightlab.core.
"""
