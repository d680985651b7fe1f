"""The typed result of a trace: what each graph input is (Role), what the function wrote
(Mutation), where each kind of output sits (OutputLayout), and TraceResult, the frozen
record the compiler builds programs from (printable as the graph with its roles)."""
import dataclasses
import enum

from aotgrad.ir.printer import format_graph


class Role(enum.Enum):
    """Where a primal input of the joint graph comes from on each call."""
    ARG = "arg"          # the call's flattened argument at an index
    LIFTED = "lifted"    # a tensor the function reads (parameter, closed-over, constant)
    SEED = "seed"        # a fresh seed of the default generator


class Mutation(enum.Enum):
    """What a written-back output of the forward updates after each call."""
    ARG = "arg"            # the argument at an index, written in place
    LIFTED = "lifted"      # a tensor the function reads, written in place
    GRAD = "grad"          # the .grad of a tensor the function reads
    ARG_GRAD = "arg_grad"  # the .grad of the argument at an index
    ESCAPE = "escape"      # a tensor made inside and stored away: made concrete


@dataclasses.dataclass(frozen=True)
class OutputLayout:
    """The joint graph's outputs, in order: the tensor outputs, the written-back values
    (one per mutation), the gradients of the differentiated inputs that have one, the
    gradients of the new values of tensors written in place (`written_grads`)."""
    n_tensor_outputs: int
    n_mutations: int
    n_grads: int
    n_written_grads: int

    @property
    def n_forward(self):
        """The forward's own outputs (tensor outputs and written-back values)."""
        return self.n_tensor_outputs + self.n_mutations

    @property
    def tensor_outputs(self):
        return slice(0, self.n_tensor_outputs)

    @property
    def written_back(self):
        return slice(self.n_tensor_outputs, self.n_forward)

    @property
    def forward(self):
        return slice(0, self.n_forward)

    @property
    def grads(self):
        return slice(self.n_forward, self.n_forward + self.n_grads)

    @property
    def written(self):
        return slice(self.n_forward + self.n_grads, None)


@dataclasses.dataclass(frozen=True, eq=False)  # (compared by identity, as before)
class TraceResult:
    """The joint graph and what the runtime needs to call it (`str()` prints it).

    graph.inputs  = [tensor args..., lifted..., seeds..., tangents...] (`roles` name the
                    first n_primals); graph.outputs laid out by `layout`.
    roles          = per primal input: (Role, flat argument index | tensor | None)
    mutations      = per written-back output: (Mutation, argument index | tensor)
    diff_roles     = the differentiated inputs: (Role.ARG, index) | (Role.LIFTED, tensor)
    diff_outs      = indices of the differentiable outputs among the flattened outputs, then
                    len(outputs) + j for mutations[j] written with a value that has history
    grad_present   = per diff_roles entry: the backward returns a gradient for it
    written_grads  = the differentiable output slots (positions in diff_outs) of tensors
                    written in place whose whole gradient (from the uses inside the
                    function too) the backward returns last: their retain_grad and hooks
    grad_clears    = (Mutation.GRAD | Mutation.ARG_GRAD, target) whose .grad the call clears
    out_args       = per output: the index of the argument it is (the object the function
                    got), or None
    out_leaves     = per output: None for a tensor, else the Python value returned
    retained_args  = indices of the (non-leaf) arguments the function called retain_grad() on
    out_may_alias  = per tensor output: it may share memory with an input (it is an argument
                    or a parameter/closed-over tensor returned as is); others never do
    grad_guards, arg_grad_guards, lifted_guards, identity_guards, guard_roots: what the state
                    guards check (arg_grad_guards: an argument's .grad, by its index)
    layout_read    = the trace read a memory layout (see the field)
    """
    graph: object
    roles: list
    n_primals: int
    in_tree: object
    out_tree: object
    diff_outs: list
    diff_roles: list
    mutations: list
    escaped: bool
    grad_clears: list
    grad_guards: list
    arg_grad_guards: list
    grad_present: list
    written_grads: list
    out_may_alias: list
    lifted_guards: list
    identity_guards: list
    guard_roots: list
    out_leaves: list
    out_args: list
    out_is_tensor: list
    retained_args: list
    layout: OutputLayout
    # a trace with symbolic sizes: its ShapeEnv (guards, specialisations) and, per symbol,
    # the (flat argument index, dim) it stands for; None and () for a static trace
    shape_env: object = None
    symbol_dims: tuple = ()
    # the trace read a traced tensor's memory layout (strides, contiguity, view-or-copy):
    # then the program serves only calls whose arguments are laid out as the traced call's
    layout_read: bool = False

    def __str__(self):
        roles = ", ".join(f"{v.name}={k.value}" + (f"[{x}]" if k is Role.ARG else "")
                          for v, (k, x) in zip(self.graph.inputs, self.roles))
        return (f"{format_graph(self.graph)}\n# inputs: {roles}\n# outputs: {self.layout}\n"
                f"# mutations: {[k.value for k, _ in self.mutations]}")
