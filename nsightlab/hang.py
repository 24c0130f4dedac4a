"""`python -m nsightlab.hang` is `nsightlab hang` (see nsightlab.cli)."""

if __name__ == "__main__":
    from nsightlab.cli import run_as

    run_as("hang")
