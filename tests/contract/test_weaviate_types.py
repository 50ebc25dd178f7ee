"""The Weaviate adapter type-checks against weaviate-client's own types (no server needed), so a
client upgrade that changes an API the adapter uses fails here rather than on a lab's cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# slow (whole suite only): mypy --strict over the Weaviate adapter, ~20 s
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_weaviate_adapter_passes_mypy_strict() -> None:
    pytest.importorskip("mypy", reason="needs mypy: pip install mypy")
    # follow-imports=silent: the adapter is checked strictly, the modules it imports are only read
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
         "infra/store/weaviate.py", "infra/store/weaviate_schema.py", "infra/store/weaviate_search.py",
         "infra/store/meta.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
