"""README's results table and docs/results.md are what the report scripts write from the committed results, and
each script rewrites only its own task's rows of README's table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lab import report
from lab.report import RESULTS_PAGE, SECTIONS, Provenance, summary_label, write_summary
from lab.scripts import load_script

pytest.importorskip("scipy")
REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = REPO / "experiments"
COMMITTED = EXPERIMENTS / "results"


def block(text: str, key: str) -> str:
    (found,) = re.findall(rf"<!-- results:{key} -->\n(.*?)<!-- /results:{key} -->", text, re.S)
    return found


def generated() -> dict[str, tuple[str, list[list[str]]]]:
    """Each task's section of docs/results.md and rows of README's table, from the committed results."""
    scripts = {task: load_script(EXPERIMENTS / f"report_{task}.py") for task in SECTIONS}
    out = {}
    for task in ("sst", "sick", "trec"):
        module = scripts[task]
        runs, prov = module.full_runs(COMMITTED), Provenance.of(COMMITTED, task)
        out[task] = (module.results_section(runs, prov), module.summary_rows(runs, prov))
    structure = scripts["structure"]
    runs = structure.load(COMMITTED / "structure", quick=False)
    out["structure"] = (structure.results_section(structure.report(runs)), structure.summary_rows(runs))
    return out


def test_readme_and_the_results_page_are_what_the_report_scripts_write():
    readme, page = (REPO / "README.md").read_text(), (REPO / RESULTS_PAGE).read_text()
    rows = []
    for task, (section, summary) in generated().items():
        assert block(page, task) == f"## {SECTIONS[task]}\n\n{section.strip()}\n", f"rerun experiments/report_{task}.py"
        assert summary, task
        rows += summary
    assert block(readme, "summary").splitlines() == report.markdown_table(report.SUMMARY_HEADER, rows)


def test_a_task_rewrites_only_its_own_rows(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- results:summary -->\n<!-- /results:summary -->\nend\n")
    assert write_summary(readme, "trec", [[summary_label("trec", "TREC"), "BiLSTM", "94.0", "93.8", "4.0", "`a`"]])
    assert write_summary(readme, "sst", [[summary_label("sst", "SST fine"), "S-LSTM", "45.0", "48.9", "2.0", "`b`"],
                                         [summary_label("sst", "SST fine"), "SVM", "38.0", "40.7", "48", "`c`"]])
    assert write_summary(readme, "trec", [[summary_label("trec", "TREC"), "BiLSTM", "95.0", "93.8", "4.0", "`a`"]])
    lines = readme.read_text().splitlines()
    assert lines[0] == "intro" and lines[-1] == "end"
    # SST's rows come first (the order of SECTIONS), whichever task wrote first; TREC's row was replaced, not added.
    assert [line.split(" | ")[1] for line in lines[4:-2]] == ["S-LSTM", "SVM", "BiLSTM"]
    assert "| 95.0 |" in lines[-3] and "94.0" not in readme.read_text()
    assert not write_summary(tmp_path / "missing.md", "sst", [])


def test_anchors_are_githubs():
    assert report.anchor("TREC question classification") == "trec-question-classification"
    assert report.anchor("Results: SST (fine), 5-way") == "results-sst-fine-5-way"
