"""capsule.guest: code that runs as (part of) the guest, shipped as C sources and built on demand.

``softfloat`` is the IEEE 754 library BPF code calls for wasm float instructions (BPF has no floating point).
"""
