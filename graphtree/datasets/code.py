"""Program trees: one abstract syntax tree per Python function or method, from any folder of ``.py`` files.

:class:`CodeTrees` reads every ``.py`` file under a folder (by default the
installed packages of the running interpreter, ``site-packages``) and makes one
graph per ``def`` / ``async def`` (methods and nested functions included):

* one node per AST node, in pre-order, the root the ``def`` itself; a node's
  children are its AST children in the order of the source (``ast.iter_fields``
  order), ``edge_pos`` their position; edges point child -> parent;
* every node has two **fields**: its AST type (``node_type``; the operator of a
  ``BinOp``/``UnaryOp``/``BoolOp``/``AugAssign``/``Compare`` folds into it, e.g.
  ``BinOp.Add``; the ``Load``/``Store``/``Del`` context nodes are left out) and
  the sub-tokens of its identifiers, attribute names and literals
  (``subtoken`` with ``subtoken_index``, the node of each: ``snake_case`` and
  ``camelCase`` split and lower-cased by :func:`split_subtokens`; at most
  :data:`MAX_NODE_SUBTOKENS` a node; numbers other than small integers read
  ``<num>``);
* the function's **name is removed**: its own name and its decorators are not
  in the tree, its docstring neither, and any identifier equal to its name (a
  recursive call, ``self.name``) reads :data:`SELF_NAME`;
* labels: ``name`` (the name's sub-tokens, the target of method-name prediction
  as ogbg-code2 sets it) and ``kind`` (:func:`method_kind`, a fixed label set
  from the name's pattern, ``-1`` for a name outside it).

Splits are by **package** (the first folder or module under the root): a
seeded shuffle of the package names, each package then going to the split
furthest below its share of functions, so no package has functions in two
splits. The processed files are reproducible byte for byte (files, packages and
functions in sorted order, no timestamps), and ``manifest.json`` beside them
records the packages of each split, the versions of the installed distributions
they came from, the files that did not parse, and the functions above
``max_nodes`` nodes (counted per split, left out of the graphs).

    from graphtree.datasets import CodeTrees
    train = CodeTrees("datasets", "train", packages=["jinja2", "click", "flask"])
    train.manifest["functions"], train.subtokens[:5], train.node_types[:5]

Any folder of Python code becomes the JSON Lines that ``experiments/train.py``
reads in one command (:func:`write_jsonl`; a node's ``token`` is its type, its
sub-tokens the field ``subtokens``, a graph's ``y`` its method kind)::

    python -m graphtree.datasets.code my_project/ functions.jsonl            # one file; train.py splits it
    python -m graphtree.datasets.code site-packages/ corpus/ --split          # train/dev/test.jsonl by package
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import sysconfig
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch_geometric.data import Data, InMemoryDataset

from ..data.subtokens import split_subtokens
from .base import DEFAULT_ROOT
from .download import DatasetError, atomic_path

__all__ = ["KINDS", "MAX_NODE_SUBTOKENS", "SELF_NAME", "CodeTrees", "FunctionTree", "folder_trees", "function_trees",
           "json_record", "method_kind", "package_splits", "split_subtokens", "write_jsonl"]

MAX_NODE_SUBTOKENS = 8
"""A node keeps at most this many sub-tokens (a long string literal would otherwise outweigh its function)."""

SELF_NAME = "<self>"
"""The sub-token of an identifier equal to the function's own name (recursion, ``self.<name>``)."""

NUM = "<num>"
"""The sub-token of a number other than an integer in -1..10."""

KINDS: tuple[str, ...] = ("init", "dunder", "test", "get", "set", "predicate", "convert", "create", "check",
                          "read", "write", "add", "remove")
"""The method kinds of :func:`method_kind`, in label order (label = index)."""

# The first sub-token of a name (leading underscores stripped) that gives its kind.
_PREFIX_KINDS = {
    "test": "test", "get": "get", "set": "set",
    "is": "predicate", "has": "predicate", "can": "predicate", "should": "predicate",
    "to": "convert", "as": "convert", "from": "convert",
    "make": "create", "create": "create", "build": "create", "new": "create",
    "check": "check", "validate": "check", "verify": "check", "ensure": "check", "assert": "check",
    "read": "read", "load": "read", "parse": "read",
    "write": "write", "save": "write", "dump": "write",
    "add": "add", "append": "add", "insert": "add", "update": "add", "register": "add",
    "remove": "remove", "delete": "remove", "clear": "remove", "pop": "remove", "discard": "remove",
}

_FOLDED_OPERATOR = {"BinOp": "op", "UnaryOp": "op", "BoolOp": "op", "AugAssign": "op", "Compare": "ops"}
_FUNCTION = (ast.FunctionDef, ast.AsyncFunctionDef)


def method_kind(name: str) -> int:
    """The :data:`KINDS` label of a function named ``name``, ``-1`` when its name has none of the patterns.

    ``__init__`` is ``init``; any other ``__x__`` is ``dunder``; else the
    first sub-token of the name, leading underscores stripped, decides:
    ``test``; ``get``; ``set``; ``is/has/can/should`` -> ``predicate``;
    ``to/as/from`` -> ``convert``; ``make/create/build/new`` -> ``create``;
    ``check/validate/verify/ensure/assert`` -> ``check``; ``read/load/parse`` ->
    ``read``; ``write/save/dump`` -> ``write``;
    ``add/append/insert/update/register`` -> ``add``;
    ``remove/delete/clear/pop/discard`` -> ``remove``. The name is not in the
    tree (:func:`function_trees`), so a model reads the kind from what the
    function does.
    """
    if name == "__init__":
        return KINDS.index("init")
    if len(name) > 4 and name.startswith("__") and name.endswith("__"):
        return KINDS.index("dunder")
    words = split_subtokens(name)
    kind = _PREFIX_KINDS.get(words[0]) if words else None
    return -1 if kind is None else KINDS.index(kind)


@dataclass
class FunctionTree:
    """One function's tree: per node (pre-order) its type, sub-tokens and parent (``-1`` at the root); its name,
    dotted path within the module (``qualname``), 1-based line and the module's path relative to the root."""

    node_types: list[str]
    subtokens: list[list[str]]
    parents: list[int]
    name: str
    qualname: str
    line: int
    path: str = ""
    package: str = ""
    kind: int = field(init=False)

    def __post_init__(self) -> None:
        self.kind = method_kind(self.name)

    @property
    def num_nodes(self) -> int:
        return len(self.node_types)


def _literal_subtokens(value: Any) -> list[str]:
    if isinstance(value, bool) or value is None or value is Ellipsis:
        return [str(value).lower()]
    if isinstance(value, int):
        return [str(value)] if -1 <= value <= 10 else [NUM]
    if isinstance(value, (float, complex)):
        return [NUM]
    if isinstance(value, bytes):
        return split_subtokens(value.decode("latin-1"))
    return split_subtokens(str(value))


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _build(function: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> FunctionTree:
    """The tree of ``function`` with its name, decorators and docstring taken out (see the module docstring)."""
    name = function.name
    types: list[str] = []
    tokens: list[list[str]] = []
    parents: list[int] = []

    def words(value: Any) -> list[str]:
        if isinstance(value, str) and value == name:
            return [SELF_NAME]
        return _literal_subtokens(value)

    def visit(node: ast.AST, parent: int) -> None:
        index = len(types)
        kind = type(node).__name__
        if kind in _FOLDED_OPERATOR:
            op = getattr(node, _FOLDED_OPERATOR[kind])
            kind = f"{kind}.{type(op[0] if isinstance(op, list) else op).__name__}"
        types.append(kind)
        parents.append(parent)
        own: list[str] = []
        children: list[ast.AST] = []
        for key, value in ast.iter_fields(node):
            if node is function and key in ("name", "decorator_list"):
                continue
            if kind.startswith(tuple(_FOLDED_OPERATOR)) and key in ("op", "ops"):
                continue
            if node is function and key == "body" and value and _is_docstring(value[0]):
                value = value[1:]
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, ast.expr_context):
                    continue
                if isinstance(item, ast.AST):
                    children.append(item)
                elif item is not None and key != "type_comment" and key != "kind":
                    own.extend(words(item))
        tokens.append(own[:MAX_NODE_SUBTOKENS])
        for child in children:
            visit(child, index)

    visit(function, -1)
    return FunctionTree(types, tokens, parents, name, qualname, function.lineno)


def function_trees(source: str, path: str = "<string>") -> list[FunctionTree]:
    """The tree of every function and method of the module ``source`` (nested ones too), in source order.

    Raises:
        SyntaxError: ``source`` does not parse.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences in old code
        module = ast.parse(source, filename=path)
    found: list[FunctionTree] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCTION):
                found.append(_build(child, prefix + child.name))
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(module, "")
    for tree in found:
        tree.path = path
    return found


def package_splits(sizes: dict[str, int], ratios: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                   names: Sequence[str] = ("train", "dev", "test")) -> dict[str, list[str]]:
    """Packages to splits: the names sorted, shuffled by ``seed``; each package in that order then goes to the split
    whose functions so far fall furthest below its ratio of all functions (``sizes``: functions per package), so
    that the splits come near their ratios with every package in one split. Sorted package lists per split."""
    order = sorted(sizes)
    random.Random(seed).shuffle(order)
    total = sum(sizes.values())
    filled = dict.fromkeys(names, 0)
    chosen: dict[str, list[str]] = {name: [] for name in names}
    for package in order:
        split = max(names, key=lambda s: (ratios[names.index(s)] * total - filled[s], -names.index(s)))
        chosen[split].append(package)
        filled[split] += sizes[package]
    return {s: sorted(p) for s, p in chosen.items()}


def _python_files(root: Path, packages: Sequence[str] | None) -> Iterator[tuple[str, Path]]:
    """``(package, file)`` for every ``.py`` file under ``root`` in sorted order; ``packages`` picks some."""
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        package = entry.name[:-3] if entry.is_file() and entry.name.endswith(".py") else entry.name
        if packages is not None and package not in packages:
            continue
        if entry.is_dir() and not entry.name.endswith((".dist-info", ".egg-info", "__pycache__")):
            for file in sorted(entry.rglob("*.py")):
                yield package, file
        elif entry.is_file() and entry.name.endswith(".py"):
            yield package, entry


def _versions(packages: Sequence[str], root: Path) -> dict[str, str | None]:
    """``dist==version`` of the installed distribution of each package, where ``root`` is this interpreter's
    site-packages (a folder of one's own has no installed versions)."""
    site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    if root.resolve() not in site:
        return dict.fromkeys(packages)
    from importlib import metadata

    dists = metadata.packages_distributions()
    out: dict[str, str | None] = {}
    for package in packages:
        names = sorted(dists.get(package, []))
        out[package] = ", ".join(f"{n}=={metadata.version(n)}" for n in names) if names else None
    return out


class CodeTrees(InMemoryDataset):
    r"""One abstract syntax tree per Python function or method of a folder of ``.py`` files (see the module
    docstring for the trees, fields, labels and splits).

    Each graph has ``edge_index`` (child -> parent), ``edge_pos``, ``node_type``
    ``[N]`` (ids into :attr:`node_types`), ``subtoken`` ``[T]`` (ids into
    :attr:`subtokens`) with ``subtoken_index`` ``[T]`` (its node), ``kind``
    ``[1]`` (:data:`KINDS` label or ``-1``), ``name`` (the name's sub-tokens, a
    list of strings), ``qualname``, ``package``, ``path`` (relative to the
    source folder) and ``line``. Both vocabularies hold every string of all
    splits, sorted: a model picks its own from the training split.

    Args:
        root: Data root; files go to ``<root>/code/processed/<tag>/``, ``tag``
            a hash of the options and the source folder.
        split: ``"train"``, ``"dev"`` or ``"test"``.
        source: Folder of ``.py`` files; default this interpreter's
            site-packages.
        packages: Only these packages (first folder or module under
            ``source``); default all.
        max_nodes: Functions with more nodes are counted in the manifest
            (``too_large``) and left out.
        split_ratios: Shares of functions of train, dev and test.
        seed: Seed of the package split.
        transform, pre_transform, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.

    Raises:
        DatasetError: an unknown split, a missing source folder, a package not
            found, or a split with no package.
    """

    splits = ("train", "dev", "test")

    def __init__(self, root: str | os.PathLike = DEFAULT_ROOT, split: str = "train", *,
                 source: str | os.PathLike | None = None, packages: Sequence[str] | None = None,
                 max_nodes: int = 500, split_ratios: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                 transform: Callable | None = None, pre_transform: Callable | None = None, log: bool = True,
                 force_reload: bool = False) -> None:
        if split not in self.splits:
            raise DatasetError(f"split must be one of {', '.join(self.splits)}, got {split!r}")
        self.source = Path(source if source is not None else sysconfig.get_paths()["purelib"])
        if not self.source.is_dir():
            raise DatasetError(f"source folder {self.source} does not exist")
        if len(split_ratios) != 3 or abs(sum(split_ratios) - 1) > 1e-9 or min(split_ratios) <= 0:
            raise DatasetError(f"split_ratios must be three positive shares summing to 1, got {split_ratios}")
        self.split, self.max_nodes, self.seed = split, max_nodes, seed
        self.packages = None if packages is None else sorted(set(packages))
        self.split_ratios = tuple(float(r) for r in split_ratios)
        super().__init__(str(Path(root) / "code"), transform, pre_transform, log=log, force_reload=force_reload)
        self.load(self.processed_paths[self.splits.index(split)])
        folder = Path(self.processed_dir)
        self.manifest = json.loads((folder / "manifest.json").read_text())
        vocab = json.loads((folder / "vocab.json").read_text())
        self.node_types: list[str] = vocab["node_types"]
        self.subtokens: list[str] = vocab["subtokens"]

    @property
    def options(self) -> dict[str, Any]:
        return dict(source=str(self.source.resolve()), packages=self.packages, max_nodes=self.max_nodes,
                    split_ratios=list(self.split_ratios), seed=self.seed, format=1)

    @property
    def processed_dir(self) -> str:
        tag = hashlib.sha256(json.dumps(self.options, sort_keys=True).encode()).hexdigest()[:12]
        return str(Path(self.root) / "processed" / tag)

    @property
    def raw_file_names(self) -> list[str]:
        return []

    @property
    def processed_file_names(self) -> list[str]:
        return [f"{s}.pt" for s in self.splits] + ["manifest.json", "vocab.json"]

    def download(self) -> None:  # the source folder is read in place
        pass

    def process(self) -> None:
        trees, unparsed = folder_trees(self.source, self.packages)
        if self.packages is not None:
            missing = sorted(set(self.packages) - set(trees))
            if missing:
                raise DatasetError(f"no functions of package(s) {', '.join(missing)} under {self.source}")
        sizes = {p: len(t) for p, t in trees.items() if t}
        chosen = package_splits(sizes, self.split_ratios, self.seed, self.splits)
        empty = [s for s, p in chosen.items() if not p]
        if empty:
            raise DatasetError(f"{len(sizes)} package(s) cannot fill the splits {', '.join(self.splits)}: "
                               f"{', '.join(empty)} got none; read more packages")
        kept = {s: [t for p in chosen[s] for t in trees[p] if t.num_nodes <= self.max_nodes] for s in self.splits}
        node_types = sorted({k for s in kept.values() for t in s for k in t.node_types})
        subtokens = sorted({w for s in kept.values() for t in s for ws in t.subtokens for w in ws})
        type_id = {k: i for i, k in enumerate(node_types)}
        token_id = {w: i for i, w in enumerate(subtokens)}
        for s, path in zip(self.splits, self.processed_paths):
            graphs = [to_data(t, type_id, token_id) for t in kept[s]]
            if self.pre_transform is not None:
                graphs = [self.pre_transform(g) for g in graphs]
            with atomic_path(path) as tmp:
                self.save(graphs, tmp)
        manifest = dict(
            options={k: v for k, v in self.options.items() if k != "source"},
            source_is_site_packages=Path(self.source).resolve() == Path(sysconfig.get_paths()["purelib"]).resolve(),
            packages=chosen, versions=_versions(sorted(sizes), self.source),
            functions={s: len(kept[s]) for s in self.splits},
            nodes={s: sum(t.num_nodes for t in kept[s]) for s in self.splits},
            too_large={s: sum(t.num_nodes > self.max_nodes for p in chosen[s] for t in trees[p])
                       for s in self.splits},
            with_kind={s: sum(t.kind >= 0 for t in kept[s]) for s in self.splits},
            unparsed_files=unparsed, node_types=len(node_types), subtokens=len(subtokens))
        for name, obj in (("manifest.json", manifest), ("vocab.json", dict(node_types=node_types,
                                                                            subtokens=subtokens))):
            with atomic_path(Path(self.processed_dir) / name) as tmp:
                Path(tmp).write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")

    def __repr__(self) -> str:
        return f"CodeTrees({self.split}, {len(self)} functions)"


def to_data(tree: FunctionTree, type_id: dict[str, int], token_id: dict[str, int]) -> Data:
    """A :class:`FunctionTree` as a graph with ids into the vocabularies (see :class:`CodeTrees`)."""
    child = [k for k, p in enumerate(tree.parents) if p >= 0]
    position: dict[int, int] = {}
    edge_pos = []
    for k in child:
        parent = tree.parents[k]
        edge_pos.append(position.get(parent, 0))
        position[parent] = edge_pos[-1] + 1
    token_index = [k for k, words in enumerate(tree.subtokens) for _ in words]
    return Data(edge_index=torch.tensor([child, [tree.parents[k] for k in child]], dtype=torch.long).view(2, -1),
                edge_pos=torch.tensor(edge_pos, dtype=torch.long),
                node_type=torch.tensor([type_id[k] for k in tree.node_types], dtype=torch.long),
                subtoken=torch.tensor([token_id[w] for ws in tree.subtokens for w in ws], dtype=torch.long),
                subtoken_index=torch.tensor(token_index, dtype=torch.long),
                kind=torch.tensor([tree.kind]), name=split_subtokens(tree.name), qualname=tree.qualname,
                package=tree.package, path=tree.path, line=tree.line, num_nodes=tree.num_nodes)


# --------------------------------------------------------------------------- a folder to JSON Lines


def folder_trees(source: str | os.PathLike, packages: Sequence[str] | None = None
                 ) -> tuple[dict[str, list[FunctionTree]], list[str]]:
    """Every function of every ``.py`` file under ``source``, by package (the first folder or module under it),
    in sorted file order; and the files that did not parse (relative to ``source``)."""
    root = Path(source)
    if not root.is_dir():
        raise DatasetError(f"source folder {root} does not exist")
    trees: dict[str, list[FunctionTree]] = {}
    unparsed: list[str] = []
    for package, file in _python_files(root, packages):
        relative = file.relative_to(root).as_posix()
        try:
            found = function_trees(file.read_text(encoding="utf-8"), relative)
        except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError):
            unparsed.append(relative)
            continue
        for tree in found:
            tree.package = package
        trees.setdefault(package, []).extend(found)
    return trees, unparsed


def json_record(tree: FunctionTree, label: bool = True) -> dict[str, Any]:
    """A function's tree as one JSON Lines record of :class:`~graphtree.datasets.GraphFiles`: per node its type as
    ``token`` and its sub-tokens as the field ``subtokens``, the ``parents``, and (``label``) its method kind as
    ``y`` (``null`` for a name of no kind)."""
    nodes = [{"token": kind, "fields": {"subtokens": words}} if words else {"token": kind}
             for kind, words in zip(tree.node_types, tree.subtokens)]
    record: dict[str, Any] = {"nodes": nodes, "parents": tree.parents}
    if label:
        record["y"] = tree.kind if tree.kind >= 0 else None
    return record


def write_jsonl(trees: Sequence[FunctionTree], path: str | os.PathLike, label: bool = True) -> Path:
    """Write ``trees`` as JSON Lines (:func:`json_record`, one line each) and, beside it, ``<stem>.functions.tsv``:
    per record its line, package, file, qualified name and (removed) name, so that a prediction of
    ``train.py`` can be traced to its function. Returns the JSON Lines file."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            for tree in trees:
                handle.write(json.dumps(json_record(tree, label), separators=(",", ":")) + "\n")
    index = out.with_name(f"{out.stem}.functions.tsv")
    with atomic_path(index) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("line\tpackage\tpath\tqualname\tname\n")
            for line, tree in enumerate(trees, start=1):
                handle.write(f"{line}\t{tree.package}\t{tree.path}\t{tree.qualname}\t{tree.name}\n")
    return out


def _sample(trees: list[FunctionTree], size: int | None) -> list[FunctionTree]:
    """At most ``size`` of ``trees``, a fixed random subset (seed 0) in their order: ``experiments/code.py``'s
    sample of its training functions."""
    if size is None or len(trees) <= size:
        return trees
    keep = torch.randperm(len(trees), generator=torch.Generator().manual_seed(0))[:size]
    return [trees[i] for i in sorted(keep.tolist())]


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m graphtree.datasets.code SOURCE OUT``: see the module docstring and ``--help``."""
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="python -m graphtree.datasets.code",
        description="Write one AST per Python function of a folder as the JSON Lines that experiments/train.py "
                    "reads: each node's type as its token, its identifier and literal sub-tokens as the field "
                    "'subtokens', the function's name, decorators and docstring removed, and its method kind "
                    f"({', '.join(KINDS)}) as the graph label y.")
    p.add_argument("source", help="a folder of .py files (e.g. a project, or site-packages)")
    p.add_argument("out", help="a .jsonl file; with --split, a folder for train.jsonl, dev.jsonl and test.jsonl")
    p.add_argument("--split", action="store_true",
                   help="split by package as CodeTrees does (seeded; no package in two splits)")
    p.add_argument("--packages", nargs="+", default=None, help="only these packages (first folder under SOURCE)")
    p.add_argument("--max-nodes", type=int, default=300, help="leave out functions of more nodes (default 300)")
    p.add_argument("--all", action="store_true",
                   help="keep the functions whose name has no kind, with y null (default: only those with one)")
    p.add_argument("--no-label", action="store_true", help="write no y (a file to predict)")
    p.add_argument("--train-size", type=int, default=None,
                   help="with --split: at most this many training functions, a fixed sample (seed 0), as "
                        "experiments/code.py samples its 12,000")
    p.add_argument("--seed", type=int, default=0, help="seed of the package split (default 0)")
    args = p.parse_args(argv)
    try:
        trees, unparsed = folder_trees(args.source, args.packages)
    except DatasetError as err:
        p.exit(2, f"error: {err}\n")
    if args.packages is not None and sorted(set(args.packages) - set(trees)):
        p.exit(2, f"error: no functions of package(s) {', '.join(sorted(set(args.packages) - set(trees)))} "
                  f"under {args.source}\n")

    def keep(tree: FunctionTree) -> bool:
        return tree.num_nodes <= args.max_nodes and (args.all or args.no_label or tree.kind >= 0)

    if not args.split:
        chosen = {"all": [t for package in sorted(trees) for t in trees[package] if keep(t)]}
        paths = {"all": Path(args.out)}
    else:
        sizes = {package: len(found) for package, found in trees.items() if found}
        packages = package_splits(sizes, seed=args.seed)
        if not all(packages.values()):
            p.exit(2, f"error: {len(sizes)} package(s) under {args.source} cannot fill train, dev and test; "
                      "write one file (without --split) and let train.py split it\n")
        chosen = {s: [t for package in packages[s] for t in trees[package] if keep(t)] for s in packages}
        chosen["train"] = _sample(chosen["train"], args.train_size)
        paths = {s: Path(args.out) / f"{s}.jsonl" for s in chosen}
    for split, found in chosen.items():
        if not found:
            p.exit(2, f"error: no function of {args.source} to write for {split} (at most {args.max_nodes} nodes"
                      + ("" if args.all or args.no_label else ", with a kind; --all keeps the others") + ")\n")
        write_jsonl(found, paths[split], label=not args.no_label)
        labelled = sum(t.kind >= 0 for t in found)
        print(f"{paths[split]}: {len(found)} functions, {sum(t.num_nodes for t in found)} nodes, "
              f"{labelled} with a kind", file=sys.stderr)
    if unparsed:
        print(f"{len(unparsed)} file(s) did not parse and were skipped, e.g. {unparsed[0]}", file=sys.stderr)


if __name__ == "__main__":
    main()
