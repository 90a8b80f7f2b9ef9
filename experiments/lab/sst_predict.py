"""``python experiments/sst.py predict CHECKPOINT "a sentence"``: parse the sentence with spaCy, classify every
node of its binarized tree with a checkpoint's best-dev model, print the tree on stdout and draw it as a PNG.

The model is rebuilt by the experiment's own ``build_model`` from the settings
stored in the checkpoint, with the vocabulary and classes stored beside them.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Container
from pathlib import Path
from typing import Any

import torch

from graphtree.parse import parse
from graphtree.train.transforms import recursive_tree
from graphtree.vocab import Vocab

from .runs import ArgumentParser, RunPaths, fail
from .sst_options import PREDICT_USAGE

__all__ = ["PREDICT_USAGE", "draw_tree", "load_checkpoint", "picture_path", "predict", "render_tree"]

PICTURE = "sst-tree.png"   # the picture's name in the output folder, or in a folder given to --png


def picture_path(png: str | None, out: str | os.PathLike) -> Path:
    """Where the picture goes: ``OUT/sst-tree.png`` by default, ``sst-tree.png`` in a folder given to ``--png``,
    ``.png`` added to a name without a suffix; a user error for another suffix or a missing folder."""
    if png is None:
        return Path(out) / PICTURE
    path = Path(png)
    if path.is_dir() or png.endswith(("/", os.sep)):
        path = path / PICTURE
    elif path.suffix == "":
        path = path.with_name(path.name + ".png")
    elif path.suffix.lower() != ".png":
        fail(f"--png {png}: the picture is a PNG file; give a name ending in .png")
    if not path.resolve().parent.is_dir():
        fail(f"--png {png}: the folder {path.parent} does not exist; create it or choose another path")
    return path


def predict(argv: list[str], build_model: Callable[..., tuple[torch.nn.Module, Any]], models: Container[str],
            out: str | os.PathLike) -> Path:
    """The ``predict`` command of ``experiments/sst.py``: the tree on stdout, the picture's path on stderr; returns
    that path. ``build_model(config, vocab_size, num_classes, None)`` rebuilds the checkpoint's model, ``models``
    names the experiment's models, ``out`` is the default output folder."""
    p = ArgumentParser(prog="sst.py predict", usage=PREDICT_USAGE,
                                description="Parse a sentence with spaCy and classify every node of its binarized "
                                            "tree with a checkpoint's best-dev model; print the tree and draw it.")
    p.add_argument("checkpoint", help="a checkpoint of experiments/sst.py, e.g. runs/checkpoints/sst/<run>.pt")
    p.add_argument("text", help="the sentence, in quotes")
    p.add_argument("--out", default=str(out), help="output folder of the runs: the picture goes there unless --png "
                                                   "says otherwise, and CHECKPOINT's neighbours are listed from "
                                                   "there when it is missing (default: runs/)")
    p.add_argument("--png", default=None, help=f"where to save the tree picture, a .png file or a folder "
                                               f"(default: OUT/{PICTURE})")
    args = p.parse_args(argv)
    state = load_checkpoint(args.checkpoint, RunPaths.under(args.out, "sst").checkpoints, models)
    if not args.text.strip():
        fail('the sentence is empty; give one in quotes, e.g. "A gorgeous, witty film."')
    picture = picture_path(args.png, args.out)
    cfg, extra = state["config"], state["extra"]
    vocab, classes = Vocab(extra["vocab"], lowercase=extra["lowercase"]), extra["classes"]
    model, _ = build_model(cfg, len(vocab), len(classes), None)
    model.load_state_dict(state["best"]["model"] if state["best"]["model"] is not None else state["model"])
    model.eval()
    tree = parse(args.text, vocab=vocab).binary
    if cfg["structure"] != "gold":
        tree = recursive_tree(tree, cfg["structure"], vocab)
    with torch.no_grad():
        probs = torch.softmax(model(tree), dim=-1)
    lines, nodes = render_tree(tree, probs, classes)
    print("\n".join(lines))
    picture.parent.mkdir(parents=True, exist_ok=True)  # the default output folder may not be there yet
    draw_tree(nodes, classes, args.text, picture)
    print(f"picture: {picture}", file=sys.stderr)
    return picture


def load_checkpoint(path: str, saved_in: Path, models: Container[str]) -> dict[str, Any]:
    """The checkpoint of an SST run at ``path`` (its model one of ``models``); a user error naming the problem when
    it is not one. ``saved_in`` is where training writes them, for the hint when ``path`` is missing."""
    if not Path(path).is_file():
        saved = sorted(saved_in.glob("*.pt"))
        hint = (f"; {len(saved)} in {saved_in}, e.g. {saved[-1].name}" if saved else
                f"; training writes one per run to {saved_in}/<run>.pt")
        fail(f"no checkpoint at {path}{hint}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # a pickle, zip or torch error: all mean "not a checkpoint"
        fail(f"{path} is not a checkpoint of experiments/sst.py (it does not load: {type(error).__name__})")
    if not isinstance(state, dict) or not {"config", "extra", "best"} <= state.keys():
        fail(f"{path} is not a checkpoint of experiments/sst.py (no config, vocabulary or best model)")
    cfg = state["config"]
    if not {"structure", "model"} <= cfg.keys() or cfg["model"] not in models or not (
            {"classes", "vocab"} <= state["extra"].keys()):
        fail(f"{path} is a checkpoint of another experiment (model {cfg.get('model')!r}, settings "
             f"{', '.join(sorted(cfg)[:6])}, ...), not of experiments/sst.py; give one from runs/checkpoints/sst/")
    return state


def render_tree(tree: Any, probs: torch.Tensor, classes: list[str]) -> tuple[list[str], list[dict]]:
    """Indented text of the tree (class and span of every node) and the node list for the picture."""
    children: dict[int, list[tuple[int, int]]] = {}
    for child, parent, pos in zip(*tree.edge_index.tolist(), tree.edge_pos.tolist()):
        children.setdefault(parent, []).append((pos, child))
    root = int(tree.is_root.nonzero()[0])
    words, lines, nodes = tree.tokens, [], []
    stack = [(root, 0)]
    while stack:
        node, indent = stack.pop()
        kids = [c for _, c in sorted(children.get(node, []))]
        span = _span(node, children, tree)
        label = int(probs[node].argmax())
        text = " ".join(words[i] for i in span)
        lines.append(f"{'  ' * indent}[{label} {classes[label]} {100 * float(probs[node, label]):.0f}%] {text}")
        nodes.append(dict(node=node, kids=kids, label=label, depth=indent, span=span,
                          word=words[int(tree.word_pos[node])] if int(tree.word_pos[node]) >= 0 else None))
        stack.extend((c, indent + 1) for c in reversed(kids))
    return lines, nodes


def _span(node: int, children: dict, tree: Any) -> list[int]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if int(tree.word_pos[n]) >= 0:
            out.append(int(tree.word_pos[n]))
        stack.extend(c for _, c in children.get(n, []))
    return sorted(out)


def draw_tree(nodes: list[dict], classes: list[str], title: str, path: str | os.PathLike) -> None:
    """Leaves in word order, parents above the middle of their children, coloured red (negative) to green."""
    # matplotlib's own notices (a temporary font cache where the home folder is read-only, a character the font
    # lacks, drawn as a box; the printed tree has the word) are no news to the user of predict: kept off stderr.
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _draw(plt, nodes, classes, title, path)


def _draw(plt: Any, nodes: list[dict], classes: list[str], title: str, path: str | os.PathLike) -> None:

    cmap = plt.get_cmap("RdYlGn")
    x = {n["node"]: (sum(n["span"]) / len(n["span"]) if n["span"] else 0.0) for n in nodes}
    by_id = {n["node"]: n for n in nodes}
    width = max(6.0, 0.7 * (1 + max((max(n["span"]) for n in nodes if n["span"]), default=0)))
    height = max(3.0, 0.55 * (1 + max(n["depth"] for n in nodes)))
    fig, ax = plt.subplots(figsize=(width, height))
    for n in nodes:
        for kid in n["kids"]:
            ax.plot([x[n["node"]], x[kid]], [-n["depth"], -by_id[kid]["depth"]], color="0.6", lw=0.8, zorder=1)
    for n in nodes:
        colour = cmap(n["label"] / max(1, len(classes) - 1))
        ax.scatter([x[n["node"]]], [-n["depth"]], s=260, color=colour, edgecolors="0.3", zorder=2)
        ax.text(x[n["node"]], -n["depth"], str(n["label"]), ha="center", va="center", fontsize=8, zorder=3)
        if n["word"] is not None:
            ax.text(x[n["node"]], -n["depth"] - 0.45, n["word"], ha="center", va="top", fontsize=9, rotation=30)
    handles = [plt.Line2D([], [], marker="o", ls="", color=cmap(k / max(1, len(classes) - 1)), label=f"{k} {c}")
               for k, c in enumerate(classes)]
    ax.legend(handles=handles, loc="upper right", fontsize=7, frameon=False)
    ax.set_title(title, fontsize=9)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


