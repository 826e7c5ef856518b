"""The shared test machinery itself: the requires_bpf guard fails an unmarked test that reaches bpf(2), even one
that swallows the error, and leaves marked tests and tests that need no kernel alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = """
import pytest

from capsule.kernel import Map, MapType


def test_unmarked_reaches_bpf():
    Map.create(MapType.ARRAY, 4, 4, 1).close()


def test_unmarked_swallows_the_error():
    try:
        Map.create(MapType.ARRAY, 4, 4, 1).close()
    except OSError:
        pass


@pytest.mark.requires_bpf
def test_marked():
    pass


def test_needs_no_kernel():
    assert 1 + 1 == 2
"""


def test_unmarked_bpf_use_fails_and_names_the_marker(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    pytester.makeconftest("from tests.conftest import *  # noqa: F403 - the hooks and fixtures under test\n")
    pytester.makeini("[pytest]\nmarkers =\n    requires_bpf: needs BPF\naddopts = --strict-markers\n")
    pytester.makepyfile(test_sample=SAMPLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    for name in ("test_unmarked_reaches_bpf", "test_unmarked_swallows_the_error"):
        assert f"test_sample.py::{name} called bpf(2) (MAP_CREATE) without the requires_bpf marker" in out
