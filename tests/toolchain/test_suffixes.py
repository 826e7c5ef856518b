"""One set of C/C++ source suffixes, which ``capsule build`` and ``capsule run`` both go by."""

from __future__ import annotations

import pytest

from capsule.toolchain.guest import is_cxx, is_source


@pytest.mark.parametrize("name,source,cxx", [
    ("a.c", True, False), ("a.cc", True, True), ("a.cpp", True, True), ("a.cxx", True, True),
    ("a.c++", True, True), ("a.C", True, True), ("a.wasm", False, False), ("a.bpf.o", False, False),
    ("a.h", False, False),
])
def test_suffixes(name: str, source: bool, cxx: bool) -> None:
    assert (is_source(name), is_cxx(name)) == (source, cxx)
