"""The thread budget: fewer intra-op threads while other processes keep the processors busy, the full count
when they are free, read from /proc/stat's counters (here a file the test writes, and a clock it sets)."""

from __future__ import annotations

import pytest
import torch

import graphtree.backend.thread_budget as budget_module
from graphtree.backend.thread_budget import ThreadBudget

TICKS = 100  # clock ticks per second on Linux (os.sysconf("SC_CLK_TCK")); the budget reads it itself


class Machine:
    """A two-processor machine's /proc/stat and this process's clocks, advanced by hand."""

    def __init__(self, path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path, self.now, self.own = path, 100.0, 5.0
        self.busy = [1000, 2000]  # busy ticks of cpu0, cpu1 since boot
        self.idle = [50_000, 50_000]
        monkeypatch.setattr(budget_module.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(budget_module.time, "process_time", lambda: self.own)
        self.write()

    def write(self) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice: busy split over user and system
        lines = [f"cpu  {sum(self.busy)} 0 0 {sum(self.idle)} 0 0 0 0 0 0"]
        lines += [f"cpu{k} {b - b // 4} 0 {b // 4} {i} 7 0 0 0 0 0"
                  for k, (b, i) in enumerate(zip(self.busy, self.idle))]
        self.path.write_text("\n".join(lines + ["intr 1 2 3", "procs_running 3"]) + "\n")

    def run(self, seconds: float, ours: float, others: float) -> None:
        """``seconds`` pass; this process keeps ``ours`` processors busy, other work ``others``."""
        self.now += seconds
        self.own += ours * seconds
        busy = round((ours + others) * seconds * TICKS)
        self.busy = [self.busy[0] + busy // 2, self.busy[1] + busy - busy // 2]
        self.idle = [i + round((2 - ours - others) * seconds * TICKS / 2) for i in self.idle]
        self.write()


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    if torch.get_num_threads() < 2:
        pytest.skip("one intra-op thread only")
    yield
    torch.set_num_threads(before)


def make_budget(tmp_path, monkeypatch, **options) -> tuple[ThreadBudget, Machine]:
    machine = Machine(tmp_path / "stat", monkeypatch)
    budget = ThreadBudget(2, stat=machine.path, **options)
    budget._cpus = [0, 1]  # the machine above, whatever this one has
    budget._tick = 1.0 / TICKS
    budget._last = budget._look()  # the first look, on that machine
    return budget, machine


def test_one_busy_process_takes_a_thread_and_gives_it_back(tmp_path, monkeypatch, two_threads):
    budget, machine = make_budget(tmp_path, monkeypatch)
    assert budget.check() == 2  # the first look only starts counting
    machine.run(1.0, ours=1.2, others=0.8)  # another process took most of a processor
    assert budget.check() == 1 and torch.get_num_threads() == 1
    assert budget.other_load == pytest.approx(0.8)
    machine.run(0.2, ours=1.0, others=0.0)  # within the interval: no new look
    assert budget.check() == 1
    machine.run(1.0, ours=1.0, others=1.0)  # still there: one thread
    assert budget.check() == 1
    machine.run(1.0, ours=1.0, others=0.1)  # gone (a tenth of a processor is background): both threads again
    assert budget.check() == 2 and torch.get_num_threads() == 2
    assert budget.record() == {"2": 1.0, "1": 2.2}


def test_a_quiet_machine_keeps_every_thread(tmp_path, monkeypatch, two_threads):
    budget, machine = make_budget(tmp_path, monkeypatch)
    budget.check()
    for _ in range(5):
        machine.run(0.6, ours=2.0, others=0.2)  # our two spinning threads and a little background
        assert budget.check() == 2
    assert budget.other_load == pytest.approx(0.2)


@pytest.mark.parametrize(("others", "cpus", "threads", "expected"),
                         [(0.0, 2, 2, 2), (0.25, 2, 2, 2), (0.3, 2, 2, 1), (1.6, 2, 2, 1), (3.0, 2, 2, 1),
                          (3.2, 16, 8, 8), (10.3, 16, 8, 5), (0.9, 4, 4, 3), (0.0, 4, 8, 4)])
def test_threads_left_by_other_work(others, cpus, threads, expected):
    # A processor counts as taken once other work keeps more than a quarter of it busy.
    budget = ThreadBudget(threads)
    budget._cpus = list(range(cpus))
    assert budget.wanted(others) == expected


def test_without_proc_stat_the_budget_stays_full(tmp_path, two_threads):
    budget = ThreadBudget(2, stat=tmp_path / "missing", interval=1e-9)
    assert budget.check() == 2 and budget.check() == 2 and torch.get_num_threads() == 2


def test_watching_checks_before_each_forward_and_leaves_the_inputs_alone(tmp_path, monkeypatch, two_threads):
    budget, machine = make_budget(tmp_path, monkeypatch)
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    with budget.watching(model):
        assert torch.equal(model(x), x @ model.weight.t() + model.bias)  # a hook's return would replace x
        machine.run(1.0, ours=1.0, others=1.0)
        model(x)
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2  # the whole pool back for what follows
    assert not model._forward_pre_hooks
    with budget.watching(model):  # the next block starts where the last look left it
        assert torch.get_num_threads() == 1
        machine.run(1.0, ours=1.0, others=0.0)
        model(x)
        assert torch.get_num_threads() == 2


def test_bad_budgets_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ThreadBudget(0)
    with pytest.raises(ValueError, match="margin"):
        ThreadBudget(2, margin=1.5)


def test_a_trainer_gives_way_while_training_and_hands_back_the_whole_pool(tmp_path, monkeypatch, two_threads):
    # Another process keeps a processor busy all along: after the first look the model trains and is scored on
    # one thread, to the numbers of a plain one-thread run; after fit and test the pool is whole again.
    from graphtree.data import from_ptb
    from graphtree.models import NodeEmbedding, TreeClassifier
    from graphtree.nn import ChildSumTreeLSTM
    from graphtree.train import PRESETS, PaperOptimizer, Trainer

    vocab = {w: k for k, w in enumerate("a b c d".split())}
    data = [from_ptb("(1 (0 a) (1 b))", vocab), from_ptb("(0 (0 c) (1 (1 d) (0 a)))", vocab)] * 3

    def trained(budget: ThreadBudget | None) -> tuple[list, float, list[int]]:
        torch.manual_seed(0)
        emb = NodeEmbedding(4, 5)
        model = TreeClassifier(emb, ChildSumTreeLSTM(5, 4), 2)
        seen: list[int] = []
        if budget is not None:
            def busy_meanwhile(module, inputs) -> None:  # runs before the budget's own hook
                machine.run(1.0, ours=1.0, others=1.0)
                seen.append(torch.get_num_threads())
            model.register_forward_pre_hook(busy_meanwhile)
        trainer = Trainer(model, PaperOptimizer.for_model(model, emb, PRESETS["tai"]), epochs=2, batch_size=2,
                          seed=0, progress=False, verbose=False, thread_budget=budget)
        fit = trainer.fit(data, data)
        return [h["train_loss"] for h in fit.history], trainer.test(data).root, seen

    torch.set_num_threads(1)
    plain = trained(None)
    torch.set_num_threads(2)
    budget, machine = make_budget(tmp_path, monkeypatch)
    losses, root, seen = trained(budget)
    assert seen[0] == 2 and set(seen[1:]) == {1}  # the first forward before any look; then one thread
    assert (losses, root) == plain[:2]
    assert torch.get_num_threads() == 2 and budget.current == 1
    assert set(budget.record()) == {"1", "2"}


def test_a_block_inside_another_leaves_the_outer_one_at_its_count(tmp_path, monkeypatch, two_threads):
    # A scoring function that calls Trainer.test inside the harness's own watching: the inner block hands the
    # whole pool back as it ends, and the outer one's next forward pass, within the interval, takes it again.
    budget, machine = make_budget(tmp_path, monkeypatch)
    model = torch.nn.Linear(3, 2)
    with budget.watching(model):
        machine.run(1.0, ours=1.0, others=1.0)
        model(torch.randn(2, 3))
        with budget.watching(model):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        model(torch.randn(2, 3))
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
