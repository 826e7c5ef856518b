"""capsule.compiler: WebAssembly modules to BPF objects of regions run by a bounded dispatcher."""

from .options import Options
from .program import compile_module
from .state import CompileError

__all__ = ["CompileError", "Options", "compile_module"]
