"""Packaging and layout: every package folder ships, imports point the design's way."""
import os
import re
import tomllib
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
NOT_SHIPPED = {"tests", "examples", "benchmarks"}


def _packages_on_disk():
    found = {"aotgrad"}
    for dirpath, dirnames, files in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        parts = rel.split(os.sep)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))
                       and not d.endswith(".egg-info")]
        if rel == "." or parts[0] in NOT_SHIPPED:
            continue
        if "__init__.py" in files:
            found.add("aotgrad." + ".".join(parts))
    return found


def test_pyproject_lists_every_package_folder():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    assert listed == _packages_on_disk()


RULES = {  # folder -> aotgrad subpackages it must not import (DESIGN.md's direction)
    "ir": ("runtime", "tracer", "codegen", "autograd", "nn", "optim", "compiler", "func"),
    "codegen": ("runtime", "tracer", "autograd", "nn", "optim", "compiler", "func"),
    "runtime": ("tracer", "codegen", "autograd", "nn", "optim", "compiler", "func"),
    "autograd": ("tracer", "codegen", "compiler", "func"),
    "nn": ("tracer", "codegen", "compiler", "func"),
    "optim": ("tracer", "codegen", "compiler", "func"),
    "serialization": ("tracer", "codegen", "compiler"),
    "utils/data": ("tracer", "codegen", "compiler"),
    "distributed": ("tracer", "codegen", "compiler"),
    "nn/parallel": ("tracer", "codegen", "compiler"),
}


def test_imports_follow_the_dependency_direction():
    pattern = re.compile(r"^\s*(?:from|import)\s+aotgrad\.(\w+)", re.M)
    bad = []
    for folder, banned in RULES.items():
        for name in os.listdir(os.path.join(ROOT, folder)):
            if name.endswith(".py"):
                text = open(os.path.join(ROOT, folder, name)).read()
                bad += [f"{folder}/{name} imports aotgrad.{m}" for m in pattern.findall(text)
                        if m in banned]
    assert bad == []
