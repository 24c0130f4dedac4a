"""`python -m nsightlab.capture` is `nsightlab capture` (see nsightlab.cli)."""

if __name__ == "__main__":
    from nsightlab.cli import run_as

    run_as("capture")
