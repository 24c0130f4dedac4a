"""problems: what is computed. The Problem protocol (problem.py: typed parameters that become the capture
command's flags, inputs, work model, reference implementations, range schema; and what the generic stages
need to know of a problem: its key fields and their order, sweep axis, table columns, tiled fields, its
implementations' colours and markers, its own ceilings), the registry (problem.py: the problems, the default
one, the problem a capture holds, implementation styles) and the implementation registry (impls.py:
callables, work models, plug-ins); and the built-in problem, attention (attention.py), a plug-in like any
other; a user's problem (examples/gemm) registers the same way.

Only this package's plug-in modules (attention.py) name a problem's fields or implementations; every other
module of nsightlab reads them through problem.py and impls.py (tests/test_plugin_boundary.py checks it).

May import: nsightlab.core.
"""

from . import attention  # noqa: F401 - the built-in problem and its SDPA references register on import
