"""`python -m nsightlab.report` is `nsightlab report` (see nsightlab.cli)."""

if __name__ == "__main__":
    from nsightlab.cli import run_as

    run_as("report")
