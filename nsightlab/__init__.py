"""nsightlab: profile any GPU kernel under Nsight Compute and Nsight Systems, and explain the result.

The package is the pipeline, one folder per stage. A stage imports only the stages listed above it:

- ``core``      errors, atomic file writes and the compressed-file cache, the machine's environment, where the
                Nsight tools are, NVTX range schemas (naming and decoding), metric names in one place.
- ``problems``  the Problem protocol and the implementation registry (plug-ins); the attention problem.
- ``parse``     Nsight Compute reports and CSV exports, Nsight Systems SQLite exports -> tidy pandas frames.
- ``store``     capture folders: the manifest (one schema, one writer), reading a capture back, import of
                reports captured anywhere.
- ``run``       sweeps (TOML), the workload (NVTX ranges around any callable; torch only at run time), capture
                with ncu / nsys (light and deep tiers), instruction-class ceilings.
- ``analysis``  counters, roofline, L2, timeline, options, performance, device, comparison, bottleneck.
- ``render``    plotly figures (one colour per implementation), page helpers, papermill reports, compare pages.
- ``cli``       the ``nsightlab`` command: capture | import | report | compare | why | store.

Everything imports without torch and without a GPU: reports rebuild from committed profiles anywhere.
No module here names a kernel package; kernels arrive through ``problems.impls`` (plug-ins).
"""
