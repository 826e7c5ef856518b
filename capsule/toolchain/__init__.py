"""capsule.toolchain: the external compilers capsule drives and where their outputs are cached.

``clang`` finds clang-19 and compiles C to BPF; ``guest`` builds C/C++ to wasm32-wasi with capsule's guest
runtime (and the runtime as a module of its own); ``native`` builds the same sources with gcc, the reference
a guest's output is compared with; ``foreign`` merges a module built by another toolchain with that
runtime; ``cache`` is the one place that decides where cached builds live. Nothing here loads or runs
anything: the package sits below the compiler (soft-float is built with it) and imports only ``capsule.wasm``.
"""
