"""No function in pipeline/ or components/ is longer than 80 lines and no module of theirs or
of benchmarks/ longer than 400, so each can be read whole; a longer one is split where its
steps (or concerns) naturally part. Every package says in its docstring what lives there."""

import ast
from pathlib import Path

import benchmarks
import components
import pipeline

MAX_LINES = 80
MAX_MODULE_LINES = 400


def _long_functions(package_dir: Path) -> list[str]:
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    found.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_80_lines():
    for package in (pipeline, components):
        assert _long_functions(Path(package.__file__).parent) == []


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n")
    assert _long_functions(tmp_path) == [f"long.py:1 long ({MAX_LINES + 1} lines)"]


def _long_modules(package_dir: Path) -> list[str]:
    return [
        f"{path.relative_to(package_dir)} ({lines} lines)"
        for path in sorted(package_dir.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]


def test_no_module_is_longer_than_400_lines():
    for package in (pipeline, components, benchmarks):
        assert _long_modules(Path(package.__file__).parent) == []


def test_the_check_sees_a_long_module(tmp_path):
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _long_modules(tmp_path) == [f"big.py ({MAX_MODULE_LINES + 1} lines)"]


def test_every_package_says_what_lives_there():
    """Each package's `__init__` opens with a docstring (two lines or so): the folder tree
    and these say where a change belongs."""
    missing = []
    for package in (pipeline, components, benchmarks):
        root = Path(package.__file__).parent
        for init in sorted(root.rglob("__init__.py")):
            if not ast.get_docstring(ast.parse(init.read_text())):
                missing.append(str(init.relative_to(root.parent)))
    assert missing == []
