"""nsightlab: capture stores, parsers, analysis and figures for the attention kernels.

Imports without torch and without a GPU: reports rebuild from committed profiles anywhere.
"""
