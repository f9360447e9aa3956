"""What pyproject.toml installs is what the code uses, and constraints.txt pins exactly that."""

from __future__ import annotations

import ast
import tomllib
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
CODE_DIRS = ("refund_bench", "services", "tests", "bench", "stack")
AVRO_SERIALIZERS = ("avro", "confluent_kafka.avro", "confluent_kafka.schema_registry.avro")
"""What confluent-kafka's ``avro`` extra is for: the ``avro`` package and the serializers
built on it and on fastavro."""


def _project() -> dict[str, list[str]]:
    """pyproject.toml's requirements: the runtime ones under ``""``, then each extra's."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def _imported_modules() -> set[str]:
    """Every module named by an import in the project's Python files."""
    names: set[str] = set()
    for folder in CODE_DIRS:
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module)
    return names


def test_confluent_kafkas_avro_extra_is_installed_only_if_its_serializers_are_used() -> None:
    """fastavro does the encoding; the extra would install the ``avro`` package for nothing."""
    [confluent] = [
        Requirement(r)
        for r in _project()[""]
        if canonicalize_name(Requirement(r).name) == "confluent-kafka"
    ]
    used = any(
        name == module or name.startswith(f"{module}.")
        for name in _imported_modules()
        for module in AVRO_SERIALIZERS
    )
    assert ("avro" in confluent.extras) == used, (
        f"confluent-kafka{sorted(confluent.extras)}: its Avro serializers are"
        f" {'' if used else 'not '}imported"
    )


def test_the_constraints_pin_exactly_what_pyproject_installs() -> None:
    """The requirement closure of the runtime and dev requirements (with their extras, as the
    installed packages' metadata declares them) is the set pinned: no pin is left over from a
    dropped requirement or extra, none is missing."""
    requirements = _project()
    todo = [(Requirement(r), "") for r in requirements[""] + requirements["dev"]]
    needed: dict[str, set[str]] = {}
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        wanted = {"", *requirement.extras} - needed.get(name, set())
        if not wanted:
            continue
        needed.setdefault(name, set()).update(wanted)
        for line in distribution(name).requires or []:
            todo.extend((Requirement(line), e) for e in wanted)
    lines = (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines()
    pinned = {canonicalize_name(line.split("==")[0]) for line in lines if "==" in line}
    assert sorted(pinned - needed.keys()) == [], "pinned, but nothing requires it"
    assert sorted(needed.keys() - pinned) == [], "required, but not pinned"
