"""`python -m nsightlab` is `nsightlab` (see nsightlab.cli)."""

from nsightlab.cli import main

raise SystemExit(main())
