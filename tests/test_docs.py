"""README and the pages under docs/: every file they link or name exists, every page is reachable from README,
and the API reference (docs/api, Sphinx) builds without a warning."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# What runs and installs write, or a reader names as an example, rather than files of the repository.
EXTENSIONS = r"\.(py|md|json|png|sh|cpp|h|toml|yml|jsonl|ptb|conllu|rst|txt|csv)$"
NOT_IN_THE_REPOSITORY = ("runs/", "build/", "datasets/sst/", "datasets/sick/", "datasets/trec/", "tree.png", "~", "$",
                         "/")


def links(page: Path) -> list[str]:
    """The targets of the page's Markdown links and images (without anchors), other than web addresses."""
    targets = re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+://|#|mailto:", t)]


def named_paths(page: Path) -> list[str]:
    """Paths the page names in inline code, one path alone between backticks (``benchmarks/results/x.json``),
    outside code blocks: those with a folder and an extension, or ending in ``/``."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    found = []
    for code in re.findall(r"`([^`\s]+)`", text):
        if code.startswith(NOT_IN_THE_REPOSITORY) or any(c in code for c in "<>*…{}=:,()"):
            continue
        if "/" in code and (code.endswith("/") or re.search(EXTENSIONS, code)):
            found.append(code)
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_linked_file_exists(page: Path):
    missing = [t for t in links(page) if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_named_path_exists(page: Path):
    # Paths in inline code are written from the repository root, as the commands run.
    missing = [p for p in named_paths(page) if not (ROOT / p).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"


def test_the_checks_find_links_and_paths():
    # The two tests above can fail: README has links and names paths for them to check.
    assert "docs/performance.md" in links(README) and "datasets/README.md" in links(README)
    assert "benchmarks/results/cpu-threads2.json" in named_paths(ROOT / "docs" / "performance.md")


def test_every_docs_page_is_linked_from_readme():
    linked = {(ROOT / t).resolve() for t in links(README)}
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "docs" / "api" / "index.rst"]
    unlinked = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked]
    assert not unlinked, f"README links no page {unlinked}"


def _documented(page: Path) -> list[str]:
    """The full names of the objects an API page describes (Sphinx's anchors of Python objects)."""
    return re.findall(r'<dt class="sig sig-object py" id="([^"]+)"', page.read_text(encoding="utf-8"))


def _private(name: str) -> bool:
    """Whether the class member ``name`` (``module.Class.member``) or what it overrides is marked ``:meta private:``."""
    import importlib

    module_name, class_name, member = name.rsplit(".", 2)
    try:
        owner = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return False
    return any(":meta private:" in (getattr(base.__dict__.get(member), "__doc__", None) or "")
               for base in getattr(owner, "__mro__", ()))


def test_the_api_reference_builds_without_warnings_a_page_a_module_public_names_only_and_offline_math(tmp_path):
    pytest.importorskip("sphinx", reason="Sphinx is not installed (pip install -e '.[docs]')")
    pytest.importorskip("latex2mathml", reason="latex2mathml is not installed (pip install -e '.[docs]')")
    import importlib

    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                             str(ROOT / "docs" / "api"), str(tmp_path / "html")],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-5000:]
    html = tmp_path / "html"
    index = (ROOT / "docs" / "api" / "index.rst").read_text(encoding="utf-8")
    modules = re.findall(r"^   (graphtree[\w.]*)$", index, flags=re.M)
    assert "graphtree.nn" in modules and "graphtree.backend.native" in modules
    assert sorted(p.stem for p in html.glob("graphtree*.html")) == sorted(modules)  # a page a module
    for module in modules:
        page = html / f"{module}.html"
        public = set(importlib.import_module(module).__all__)
        names = _documented(page)
        assert names, f"{page.name} documents nothing"
        outside = [n for n in names
                   if not n.startswith(module + ".") or n[len(module) + 1:].split(".")[0] not in public]
        assert not outside, f"{page.name} documents names outside {module}.__all__: {outside}"
        marked = [n for n in names if n.count(".") > module.count(".") + 1 and _private(n)]
        assert not marked, f"{page.name} shows members marked :meta private: {marked}"
    # The cells' kernel hook is internal: TreeCell marks it, and no cell's override shows.
    assert not [n for n in _documented(html / "graphtree.nn.html") if n.endswith(".compiled_weights")]
    # Equations are MathML in the page, no script loads from the network, and no TeX is left for one to render.
    nn_page = (html / "graphtree.nn.html").read_text(encoding="utf-8")
    assert nn_page.count("<math") > 20
    for page in html.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"<script[^>]+src=\"(https?:)?//", text), f"{page.name} loads a script from the network"
        assert "\\(" not in text and "\\[" not in text and "mathjax" not in text.lower(), page.name
    shutil.rmtree(html, ignore_errors=True)
