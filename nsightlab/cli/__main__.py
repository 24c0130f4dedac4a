"""`python -m nsightlab.cli` is `nsightlab` (as `python -m nsightlab`)."""

from nsightlab.cli import main

raise SystemExit(main())
