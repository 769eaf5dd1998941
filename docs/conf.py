"""Sphinx configuration for simeval's documentation (``make docs``)."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root: simeval itself
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "simeval"
author = "simeval contributors"
copyright = "simeval contributors"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.extlinks",
    "simeval_docs",  # _ext/simeval_docs.py: the launcher's flag table and the docs' drift checks
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]

# Text as written: "--watch" stays two hyphens (no en dash); fences without a language stay plain text.
smartquotes_action = "qe"
highlight_language = "none"

# MyST: the Markdown the repository already has, as it is.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links, checked by the build

# One docstring style: reST inline markup (``code``, :class:`...`) with Google sections (Args:).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"  # short signatures; types beside the parameters a docstring describes
autodoc_typehints_description_target = "documented_params"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True}

# Links into torchrl's and tensordict's references, without fetching inventories
# (the docs build runs offline): {torchrl}`torchrl.envs.transforms.VecNormV2`.
extlinks = {
    "torchrl": ("https://docs.pytorch.org/rl/stable/reference/generated/%s.html", "%s"),
    "tensordict": ("https://docs.pytorch.org/tensordict/stable/reference/generated/%s.html", "%s"),
}

html_theme = "furo"
html_title = "simeval"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_show_sourcelink = False
