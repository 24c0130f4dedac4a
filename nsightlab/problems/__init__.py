"""problems: what is computed. The Problem protocol (problem.py: typed parameters that become the capture
command's flags, inputs, work model, reference implementations, range schema), the implementation registry
(impls.py: callables, work models, plug-ins) and the built-in problem, attention (attention.py), a plug-in
like any other; a user's problem (examples/gemm) registers the same way.

May import: nsightlab.core.
"""

from . import attention  # noqa: F401 - the built-in problem and its SDPA references register on import
