"""capsule.compiler: WebAssembly modules to BPF objects of regions run by a bounded dispatcher."""

from .function import CompileError
from .options import Options
from .program import compile_module

__all__ = ["CompileError", "Options", "compile_module"]
