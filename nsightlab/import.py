# `python -m nsightlab.import`: "import" is a keyword, so no import statement can load this module; runpy (-m) can.
from nsightlab.importer import main

if __name__ == "__main__":
    raise SystemExit(main())
