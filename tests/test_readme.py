"""The README's Python examples run, and print what their comments say they print."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_examples():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{k}" for k in range(len(EXAMPLES))])
def test_readme_example_prints_what_it_says(code: str):
    expected = [line.split("#", 1)[1].strip() for line in code.splitlines() if line.startswith("print(")]
    assert expected, "every example ends in a print with the expected output in a comment"
    # From the repository root, where README's paths (examples/...) lead.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            cwd=README.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected
