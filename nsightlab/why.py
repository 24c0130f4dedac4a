"""`python -m nsightlab.why` is `nsightlab why` (see nsightlab.cli)."""

if __name__ == "__main__":
    from nsightlab.cli import run_as

    run_as("why")
