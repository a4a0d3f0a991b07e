"""The runtime that generated modules import: C++ kernel loading and warnings.

Depends on torch and the standard library only; see README.md.
"""

from runtime_shim.autograd import take_saved, tangents
from runtime_shim.blas import (
    addmm_activation,
    attention,
    attention_backward,
)
from runtime_shim.checks import check_index
from runtime_shim.constants import constants, keep_constants
from runtime_shim.cpp import CppLibrary, RuntimeShimError, load_cpp
from runtime_shim.cuda_graphs import cuda_graph, cuda_graph_tree
from runtime_shim.guards import SeenTensors, TensorLayouts
from runtime_shim.layout import allocator, as_layout, view
from runtime_shim.modules import ModelState, ModuleStates
from runtime_shim.objects import rebuild
from runtime_shim.optim import SGD, AdamW
from runtime_shim.provenance import check_sources
from runtime_shim.triton_launch import TritonKernels
from runtime_shim.unbound import UNBOUND
from runtime_shim.warn import warn_fallback, warn_once

__version__ = "0.1.0"

__all__ = [
    "SGD",
    "UNBOUND",
    "AdamW",
    "CppLibrary",
    "ModelState",
    "ModuleStates",
    "RuntimeShimError",
    "SeenTensors",
    "TensorLayouts",
    "TritonKernels",
    "__version__",
    "addmm_activation",
    "allocator",
    "as_layout",
    "attention",
    "attention_backward",
    "check_index",
    "check_sources",
    "constants",
    "cuda_graph",
    "cuda_graph_tree",
    "keep_constants",
    "load_cpp",
    "rebuild",
    "take_saved",
    "tangents",
    "view",
    "warn_fallback",
    "warn_once",
]
