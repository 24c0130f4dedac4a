"""render: what a person sees. Plotly figures (one colour per implementation, everywhere), page helpers for the
notebooks (parameters, tables, numbers, summaries), report rendering with papermill, comparison pages.

May import: every other stage.
"""
