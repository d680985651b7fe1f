"""The IR: Var/Eqn/Graph, the closed primitive set (shape rules + numpy reference
implementations), the printer, passes and the partitioner. Imports nothing else of aotgrad's."""
from aotgrad.ir import dtypes, prims
from aotgrad.ir.core import (Aval, Eqn, Graph, GraphBuilder, Node, Prim, PrimError, Provenance,
                             Var, aval_of, current_builder, evaluate, type_str)
from aotgrad.ir.printer import format_graph, load_graph_source
from aotgrad.ir.stages import Stage, StageHistory
from aotgrad.ir.tags import Tag
from aotgrad.ir.verifier import VerifyError, verify
