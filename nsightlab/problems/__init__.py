"""problems: what is computed. The implementation registry (callables, work models, plug-ins) and the problems they
solve (attention; a user's own problem brings its parameters, inputs and work model).

May import: nsightlab.core.
"""
