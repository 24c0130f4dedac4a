"""core: what every stage stands on. errors, files (checksums, atomic place, xz / gzip compression and the
uncompressed-file cache), environment (git commit, nvidia-smi; torch's view of the GPU, asked only on the GPU
machine), tools (where ncu / nsys are, their versions), ranges (NVTX range schemas: naming and decoding),
metrics (Nsight metric names in one place: the captures' and the analysis'), sources (a repository's source text at a
capture's commit: the one place git is asked for it), args (the commands' argument parser: a bad argument is one
line; every command's one-line error and exit statuses), text (counted nouns, the key implementation names
are compared by). The commands themselves are nsightlab.cli's.

May import: the standard library, numpy, pandas (torch only inside environment.environment()). Nothing else
of nsightlab.
"""
