"""`python -m nsightlab.cache` is `nsightlab cache` (see nsightlab.cli)."""

if __name__ == "__main__":
    from nsightlab.cli import run_as

    run_as("cache")
