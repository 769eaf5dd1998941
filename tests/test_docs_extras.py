"""README.md against the project: its extras table lists every extra of pyproject.toml, its documentation list
every page of docs/ (the pages a new user is pointed to)."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    """README's text under ``## title``, up to the next ``##`` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def readme_extras() -> set[str]:
    """The extras README's install table names (its rows' first cells, `name`; "(none)" is the core)."""
    return set(re.findall(r"^\| `([a-z0-9-]+)` \|", _section("Install"), re.M))


def readme_pages() -> set[str]:
    """The docs/ pages README's documentation list links to."""
    return set(re.findall(r"^- \[[^]]+\]\(docs/([^)#]+\.md)\)", _section("Documentation"), re.M))


def test_the_readme_extras_table_lists_every_extra_of_pyproject():
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    missing, stale = sorted(extras - readme_extras()), sorted(readme_extras() - extras)
    assert not missing and not stale, f"README.md's extras table: add {missing}, drop {stale}"


def test_the_readme_documentation_list_names_every_page_of_docs():
    pages = {p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md"}  # index.md is README itself
    missing, stale = sorted(pages - readme_pages()), sorted(readme_pages() - pages)
    assert not missing and not stale, f"README.md's documentation list: add {missing}, drop {stale}"
