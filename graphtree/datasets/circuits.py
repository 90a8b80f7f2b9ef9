r"""Random Boolean circuits: DAGs of AND, OR, NOT, XOR and MAJ gates, labelled with every node's truth value.

A circuit is a true DAG (a gate or input feeds several later gates), so it
exercises what trees do not: nodes with several parents. The generator here
is the dataset: circuits are drawn from a seeded ``random.Random``, so the
same settings give the same circuits on every machine.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Sequence

import networkx as nx
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from ..data.networkx import from_networkx
from ..errors import TreeFormatError
from .base import DEFAULT_ROOT, CorpusDataset, code_fingerprint, generated_split, split_sizes
from .download import DatasetError

__all__ = ["FAN_IN", "NODE_TYPES", "BooleanCircuits", "Circuit", "circuit_data", "evaluate_gate",
           "generate_circuits", "random_circuit"]

FAN_IN = {"AND": 2, "OR": 2, "NOT": 1, "XOR": 2, "MAJ": 3}
"""The gates and how many inputs each takes."""

NODE_TYPES = ("INPUT_0", "INPUT_1", "AND", "OR", "NOT", "XOR", "MAJ")
"""Node types, index = position of the 1 in ``x`` (an input's type is its value)."""

Circuit = tuple[list[int], list[tuple[str, list[int]]]]
"""``(inputs, gates)``: input values (0/1), then per gate its kind and operand nodes.

Nodes are numbered inputs first (``0..len(inputs)-1``), then gates in order;
a gate's operands are earlier nodes, so the numbering is topological. The last
gate is the output.
"""


def evaluate_gate(kind: str, values: Sequence[int]) -> int:
    """The output (0/1) of gate ``kind`` on input values ``values``.

    Raises:
        ValueError: an unknown gate or the wrong number of inputs.
    """
    if kind not in FAN_IN:
        raise DatasetError(f"unknown gate {kind!r}; gates are {', '.join(FAN_IN)}")
    if len(values) != FAN_IN[kind]:
        raise DatasetError(f"{kind} takes {FAN_IN[kind]} input(s), got {len(values)}")
    ones = sum(values)
    if kind == "AND":
        return int(ones == len(values))
    if kind == "OR":
        return int(ones > 0)
    if kind == "NOT":
        return 1 - values[0]
    if kind == "XOR":
        return ones % 2
    return int(2 * ones > len(values))  # MAJ


def circuit_data(inputs: Sequence[int], gates: Sequence[tuple[str, Sequence[int]]]) -> Data:
    """The ``Data`` of a circuit (see :data:`Circuit`), with every node's truth value.

    Edges point child -> parent as everywhere in graphtree: a gate is the parent
    of its operands, and ``edge_pos`` is the operand's position. Attributes, as
    :func:`graphtree.data.from_networkx` makes them, plus:

    ======================== ============= ==============================================
    ``x``                    [N, 7] float  one-hot node type (:data:`NODE_TYPES`)
    ``node_type``            [N] long      the index of that type
    ``y``                    [N] long      every node's truth value
    ``graph_y``              [1] long      the output's (last gate's) value
    ``circuit_depth``        [1] long      gates on the longest input -> output path
    ``circuit_size``         [1] long      number of gates
    ======================== ============= ==============================================

    Raises:
        TreeFormatError: an input value that is not 0/1, an unknown gate, the
            wrong number of operands, an operand that is not an earlier node or
            repeats (``position`` is the gate's index among the gates).
    """
    num_inputs = len(inputs)
    values = []
    for k, value in enumerate(inputs):
        if value not in (0, 1) or isinstance(value, float):
            raise TreeFormatError(f"input {k} has value {value!r}; inputs are 0 or 1")
        values.append(int(value))
    if not gates:
        raise TreeFormatError("a circuit needs at least one gate (the last one is the output)")
    graph = nx.DiGraph()
    graph.add_nodes_from(range(num_inputs + len(gates)))  # node k of the Data is node k of the circuit
    types = [NODE_TYPES.index(f"INPUT_{v}") for v in values]
    for g, (kind, operands) in enumerate(gates):
        node = num_inputs + g
        if kind not in FAN_IN:
            raise TreeFormatError(f"gate {g} is {kind!r}; gates are {', '.join(FAN_IN)}", position=g)
        operands = list(operands)
        if len(operands) != FAN_IN[kind]:
            raise TreeFormatError(f"gate {g} ({kind}) has {len(operands)} operand(s), it takes {FAN_IN[kind]}",
                                  position=g)
        # Earlier nodes only: this keeps the graph acyclic and the numbering topological, so one pass evaluates.
        if any(not isinstance(o, int) or not 0 <= o < node for o in operands) or len(set(operands)) != len(operands):
            raise TreeFormatError(f"gate {g} (node {node}) has operands {operands}: they must be distinct earlier "
                                  f"nodes 0..{node - 1}", position=g)
        values.append(evaluate_gate(kind, [values[o] for o in operands]))
        types.append(NODE_TYPES.index(kind))
        for slot, operand in enumerate(operands):
            graph.add_edge(operand, node, position=slot)
    data = from_networkx(graph)
    data.node_type = torch.tensor(types, dtype=torch.long)
    data.x = F.one_hot(data.node_type, len(NODE_TYPES)).float()
    data.y = torch.tensor(values, dtype=torch.long)
    data.graph_y = data.y[-1:].clone()
    data.circuit_depth = data.height[-1:].clone()  # inputs are the leaves (height 0): the output's height
    data.circuit_size = torch.tensor([len(gates)])
    return data


def random_circuit(rng: random.Random, num_inputs: int, num_gates: int,
                   gates: Sequence[str] = tuple(FAN_IN)) -> Circuit:
    """Draw one circuit: random input values, ``num_gates`` random gates, pruned to what the output uses.

    Each gate's kind is uniform over ``gates`` (among those with enough earlier
    nodes to take their inputs); its first operand is an earlier node no gate
    uses yet, when there is one (so most nodes end up feeding the output), and
    the others are uniform over all earlier nodes, so nodes often feed several
    gates. Nodes the output does not depend on are then removed, so the output
    is the only root; the result may have fewer inputs and gates than asked.

    Raises:
        ValueError: ``num_inputs`` or ``num_gates`` below 1, or no gate of
            ``gates`` can take its inputs from ``num_inputs`` inputs.
    """
    if num_inputs < 1 or num_gates < 1:
        raise DatasetError(f"a circuit needs at least one input and one gate, got {num_inputs} and {num_gates}")
    unknown = [kind for kind in gates if kind not in FAN_IN]
    if unknown or not gates:
        raise DatasetError(f"gates must be a non-empty selection of {', '.join(FAN_IN)}, got {list(gates)}")
    if min(FAN_IN[kind] for kind in gates) > num_inputs:
        raise DatasetError(f"none of the gates {list(gates)} fits {num_inputs} input(s)")
    values = [rng.randrange(2) for _ in range(num_inputs)]
    drawn: list[tuple[str, list[int]]] = []
    unused = list(range(num_inputs))
    for g in range(num_gates):
        available = num_inputs + g
        kind = rng.choice([k for k in gates if FAN_IN[k] <= available])
        first = unused.pop(rng.randrange(len(unused))) if unused else rng.randrange(available)
        others = rng.sample([n for n in range(available) if n != first], FAN_IN[kind] - 1)
        operands = [first, *others]
        rng.shuffle(operands)  # the fresh operand is not always in slot 0
        for o in others:
            if o in unused:
                unused.remove(o)
        drawn.append((kind, operands))
        unused.append(available)
    return _prune(values, drawn)


def _prune(values: list[int], gates: list[tuple[str, list[int]]]) -> Circuit:
    """Keep the nodes the output (last gate) depends on, renumbered in their order."""
    num_inputs = len(values)
    needed = {num_inputs + len(gates) - 1}
    for g in range(len(gates) - 1, -1, -1):
        if num_inputs + g in needed:
            needed.update(gates[g][1])
    new_id = {old: new for new, old in enumerate(sorted(needed))}
    inputs = [values[k] for k in range(num_inputs) if k in needed]
    kept = [(kind, [new_id[o] for o in operands]) for g, (kind, operands) in enumerate(gates)
            if num_inputs + g in needed]
    return inputs, kept


def _shares_a_node(circuit: Circuit) -> bool:
    """Whether some node feeds two gates (a true DAG, not a tree)."""
    used = [o for _, operands in circuit[1] for o in operands]
    return len(used) != len(set(used))


def generate_circuits(num: int, seed: int = 0, *, num_inputs: int = 4, num_gates: int = 12,
                      gates: Sequence[str] = tuple(FAN_IN), exclude: set | None = None) -> list[Circuit]:
    """Draw ``num`` distinct circuits with :func:`random_circuit`, the same ones for the same arguments.

    Circuits in which no node feeds two gates (trees) and repeats are drawn
    again, so every circuit is a true DAG.

    Args:
        num: How many circuits.
        seed: Seed of the ``random.Random`` stream.
        num_inputs, num_gates, gates: As in :func:`random_circuit`.
        exclude: Circuits not to draw (as ``repr`` of the circuit); the drawn
            ones are added, so successive calls on one set give disjoint circuits.

    Raises:
        ValueError: bad settings, or ``num`` distinct circuits not found in a
            reasonable number of draws (the settings allow too few).
    """
    rng = random.Random(seed)
    seen = exclude if exclude is not None else set()
    out: list[Circuit] = []
    budget = 1000 + 100 * num
    while len(out) < num:
        budget -= 1
        if budget < 0:
            raise DatasetError(f"found only {len(out)} of {num} distinct DAG circuits with {num_inputs} inputs and "
                               f"{num_gates} gates; ask for fewer, or for more inputs or gates")
        circuit = random_circuit(rng, num_inputs, num_gates, gates)
        key = repr(circuit)
        if _shares_a_node(circuit) and key not in seen:
            seen.add(key)
            out.append(circuit)
    return out


class BooleanCircuits(CorpusDataset):
    r"""Random Boolean circuits as DAGs, labelled with the truth value of every node.

    Each example is a circuit from :func:`generate_circuits` (``num_inputs``
    random 0/1 inputs, ``num_gates`` gates drawn from AND, OR, XOR (2 inputs),
    NOT (1) and MAJ (3), pruned to what the output uses, at least one node
    feeding two gates), as :func:`circuit_data` lays it out: gates are parents
    of their operands, ``x`` the one-hot node type (an input's type carries its
    value), ``y`` every node's truth value, ``graph_y`` the output's, and
    ``circuit_depth``/``circuit_size`` its depth and number of gates.

    The splits come from one seed: test first, then dev, then train, so no
    circuit is in two splits and a smaller ``train_size`` keeps the same test
    set. The processed cache ``<root>/circuits/processed`` is named by every setting.

    Args:
        root: Data root (default ``"datasets"``).
        split: ``"train"``, ``"dev"`` or ``"test"``.
        train_size, dev_size, test_size: Circuits per split.
        num_inputs, num_gates, gates: As in :func:`random_circuit`.
        seed: Seed of the generator.
        transform, pre_transform, pre_filter, log, force_reload: As in
            :class:`torch_geometric.data.InMemoryDataset`.

    Raises:
        DatasetError: an unknown split, settings out of range, an empty split.
    """

    name = "circuits"
    num_classes = 2

    def __init__(self, root: str | os.PathLike | None = DEFAULT_ROOT, split: str = "train", *,
                 train_size: int = 10_000, dev_size: int = 1_000, test_size: int = 1_000, num_inputs: int = 4,
                 num_gates: int = 12, gates: Sequence[str] = tuple(FAN_IN), seed: int = 0,
                 transform: Callable | None = None, pre_transform: Callable | None = None,
                 pre_filter: Callable | None = None, log: bool = True, force_reload: bool = False) -> None:
        self.sizes = split_sizes(train_size, dev_size, test_size)
        self.num_inputs, self.num_gates, self.gates = int(num_inputs), int(num_gates), tuple(gates)
        self.seed = int(seed)
        try:
            random_circuit(random.Random(0), self.num_inputs, self.num_gates, self.gates)  # checks the settings
        except ValueError as err:
            raise DatasetError(str(err)) from None
        super().__init__(root, split, None, None, transform, pre_transform, pre_filter, log, force_reload)

    def options_tag(self) -> str:
        return (f"code{code_fingerprint(sys.modules[__name__])}"
                f"-n{self.sizes['train']}-{self.sizes['dev']}-{self.sizes['test']}-in{self.num_inputs}"
                f"-gates{self.num_gates}-{'_'.join(self.gates)}-seed{self.seed}")

    @property
    def raw_file_names(self) -> list[str]:
        return []  # nothing to fetch: the generator is the dataset

    def process(self) -> None:
        circuits = generated_split(self.split, self.sizes, self.seed, lambda count, seed, seen: generate_circuits(
            count, seed, num_inputs=self.num_inputs, num_gates=self.num_gates, gates=self.gates, exclude=seen))
        self.save_processed([circuit_data(*circuit) for circuit in circuits])
