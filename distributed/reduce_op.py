"""ReduceOp: the reductions of all_reduce, reduce and reduce_scatter (torch.distributed's names)."""
import enum


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"          # SUM, then a division by the group's size (floating dtypes only)
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"        # bitwise, integer and bool dtypes
    BOR = "bor"
    BXOR = "bxor"

    def __repr__(self):
        return f"ReduceOp.{self.name}"


def mpi_op(op, MPI):
    """The MPI operation that carries out `op` (AVG: MPI.SUM, divided afterwards)."""
    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
            ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX, ReduceOp.BAND: MPI.BAND,
            ReduceOp.BOR: MPI.BOR, ReduceOp.BXOR: MPI.BXOR}[op]


# a bool tensor is reduced as uint8 0/1: its sum is "any" and its product "all", as in PyTorch
BOOL_AS_UINT8 = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PRODUCT: ReduceOp.MIN,
                 ReduceOp.MAX: ReduceOp.MAX, ReduceOp.MIN: ReduceOp.MIN,
                 ReduceOp.BAND: ReduceOp.BAND, ReduceOp.BOR: ReduceOp.BOR,
                 ReduceOp.BXOR: ReduceOp.BXOR}
