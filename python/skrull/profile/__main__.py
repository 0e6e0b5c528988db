"""``python -m skrull.profile``: see the package's docstring and docs/profiling.md."""

from . import main

raise SystemExit(main())
