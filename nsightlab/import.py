"""`python -m nsightlab.import` is `nsightlab import` (see nsightlab.cli)."""

if __name__ == "__main__":
    from nsightlab.cli import run_as

    run_as("import")
