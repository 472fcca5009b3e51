"""Fixtures shared with cpukern's tests (tests/); the helpers are in tools/tests/testsupport.py.

Also the collection order: under `pytest -n 2 --dist loadfile --no-loadscope-reorder`
(scripts/test.sh) each worker takes the next whole file in collection order, so
the longest files go first (longest-processing-time-first); by default xdist
orders files by their number of tests, and the one-test 7-minute release
workflow ran alone at the end while the other worker idled.
"""

from __future__ import annotations

import pytest
from testsupport import repo  # noqa: F401 (a fixture)

# Longest first: seconds per file of a cold-ccache CI run on 2 cores (2026-12-04, 3963f74).
LONGEST_FIRST = (
    "test_vllm_cpu.py",  # 547 s
    "test_release_workflow.py",  # 442
    "test_torch_project.py",  # 349
    "test_image.py",  # 340
    "test_pypi_roundtrip.py",  # 266
    "test_vllm_cpu_aarch64.py",  # 217
    "test_bochs_avx512.py",  # 188
    "test_emulated.py",  # 108
    "test_examples.py",  # 97
    "test_wheel_build.py",  # 92
    "test_progress.py",  # 89
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: file order kept otherwise
