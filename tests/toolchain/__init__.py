"""capsule.toolchain: the cache rule (the compilers themselves are exercised by tests/wasi and tests/thirdparty)."""
