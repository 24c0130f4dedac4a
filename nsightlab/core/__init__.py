"""core: what every stage stands on. errors, files (atomic place, the compressed-file cache), environment (git commit,
nvidia-smi), tools (where ncu / nsys are, their versions), ranges (NVTX range schemas: naming and decoding), metrics
(Nsight metric names in one place).

May import: the standard library, numpy, pandas. Nothing else of nsightlab.
"""
