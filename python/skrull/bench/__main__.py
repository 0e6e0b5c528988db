"""``python -m skrull.bench``: see ``skrull.bench``."""

from . import main

main()
