"""capsule.testing: what checks the kernel's results, shipped for the tests, the benchmarks and ``capsule run
--engine wasmtime``: the engines (``engines``: the kernel and the wasmtime reference behind one call) and the
WebAssembly spec-script executor (``wast_exec``). Above the runtime: nothing in ``capsule.runtime`` imports it.
"""
