"""`python -m nsightlab.compare` is `nsightlab compare` (see nsightlab.cli)."""

if __name__ == "__main__":
    from nsightlab.cli import run_as

    run_as("compare")
