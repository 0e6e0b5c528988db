"""Sphinx configuration of the Python API reference (docs/api).

Build (warnings are errors): ``sphinx-build -W -b html docs/api <out>`` with the package
importable (installed, or ``PYTHONPATH=python SKRULL_LIBRARY=.../libskrull.so``).
"""

from __future__ import annotations

project = "skrull"
author = "the skrull authors"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_custom_sections = [("Example", "params_style")]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
html_theme = "alabaster"
exclude_patterns = ["_build"]
suppress_warnings = ["ref.python"]
