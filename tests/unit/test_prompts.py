"""actors/steps/prompts.py holds every system prompt: each names a schema that exists, and no step module
writes a system prompt of its own."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from pydantic import BaseModel

from actors.steps import prompts

REPO = Path(__file__).resolve().parents[2]


def test_every_prompt_names_a_schema_that_exists() -> None:
    names = {n for n in vars(prompts) if n.endswith("_SYSTEM")}
    assert names == set(prompts.SCHEMAS)
    for dotted in prompts.SCHEMAS.values():
        module, _, cls = dotted.rpartition(".")
        schema = getattr(importlib.import_module(module), cls)
        assert issubclass(schema, BaseModel), dotted


def test_no_step_module_writes_a_system_prompt_of_its_own() -> None:
    """A {"role": "system", "content": ...} message in step code takes its content from actors.steps.prompts."""
    inline: list[str] = []
    for path in sorted((REPO / "actors" / "steps").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            fields = {k.value: v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)}
            role, content = fields.get("role"), fields.get("content")
            if isinstance(role, ast.Constant) and role.value == "system" and not (
                    isinstance(content, ast.Name) and content.id in prompts.SCHEMAS
                    or isinstance(content, ast.Call) and isinstance(content.func, ast.Attribute)
                    and isinstance(content.func.value, ast.Name) and content.func.value.id in prompts.SCHEMAS
                    or isinstance(content, ast.Name) and content.id == "system"):
                inline.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert inline == []
