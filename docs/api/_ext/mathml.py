"""Equations as MathML, written into the pages when they are built: no script, no font, no network to view them.

Sphinx's default, MathJax, typesets TeX in the reader's browser from a script on a content delivery network, so
offline every equation stays raw TeX. Here latex2mathml (pure Python) translates each ``:math:`` role and
``.. math::`` block while the page is written; browsers draw MathML themselves (MathML Core: Chromium 109+,
Firefox, Safari). A block's equations, one per paragraph of the directive, are stacked and aligned at ``&``.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from latex2mathml.converter import convert
from sphinx.application import Sphinx
from sphinx.util.math import get_node_equation_number


def _mathml(tex: str, display: str) -> str:
    try:
        return convert(tex, display=display)
    except Exception as error:  # a construct latex2mathml lacks: fail the build, naming the equation
        raise ValueError(f"latex2mathml cannot translate {tex!r}: {error}") from error


def visit_inline(self: Any, node: nodes.math) -> None:
    self.body.append(self.starttag(node, "span", "", CLASS="math") + _mathml(node.astext(), "inline") + "</span>")
    raise nodes.SkipNode


def visit_block(self: Any, node: nodes.math_block) -> None:
    self.body.append(self.starttag(node, "div", CLASS="math"))
    if node["number"]:
        self.body.append(f'<span class="eqno">({get_node_equation_number(self, node)})</span>')
    equations = [part.strip() for part in node.astext().split("\n\n") if part.strip()]
    # Several equations (or one split with \\) become the rows of one aligned block, as MathJax shows them.
    tex = (equations[0] if len(equations) == 1 and r"\\" not in equations[0]
           else r"\begin{aligned}" + r" \\ ".join(equations) + r"\end{aligned}")
    self.body.append(_mathml(tex, "block") + "</div>\n")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_html_math_renderer("mathml", inline_renderers=(visit_inline, None), block_renderers=(visit_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
