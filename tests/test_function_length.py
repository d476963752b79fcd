"""No function in pipeline/ or components/ is longer than 80 lines, so each can be read
whole; a longer one is split where its steps naturally part."""

import ast
from pathlib import Path

import components
import pipeline

MAX_LINES = 80


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
