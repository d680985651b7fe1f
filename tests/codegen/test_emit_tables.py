"""The emitter's per-prim tables are keyed by Prim objects and cover the prims they must."""
from aotgrad.codegen.emit_base import _EXPENSIVE
from aotgrad.codegen.emit_reductions import _RED_OPS, RedOp
from aotgrad.codegen.templates import TEMPLATES
from aotgrad.ir import prims
from aotgrad.ir.core import PRIMS
from aotgrad.ir.tags import Tag


def test_every_kernel_reduction_prim_has_a_reduction_op():
    # a prim the scheduler can place in a row/column reduction names its reduced dims
    reducing = {p for p in PRIMS.values()
                if Tag.AXIS_REDUCTION in p.tags or Tag.ARG_REDUCTION in p.tags}
    assert reducing == set(_RED_OPS)
    assert _RED_OPS[prims.reduce_max] is RedOp.MAX
    assert _RED_OPS[prims.argmin] is RedOp.ARGMIN


def test_loop_cost_table_is_keyed_by_pointwise_prims_with_templates():
    for p in _EXPENSIVE:
        assert PRIMS[p.name] is p
        assert p in TEMPLATES, p.name
