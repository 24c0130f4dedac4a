"""`python -m nsightlab.store` is `nsightlab store` (see nsightlab.cli)."""

from nsightlab.cli import run_as

run_as("store")
