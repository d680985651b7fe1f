"""`aotgrad.func`, laid out like `torch.func`: composable function transforms (grad, vjp,
jvp, vmap, jacrev, jacfwd, hessian, functional_call). They run eagerly and, inside a
function given to `aotgrad.compile`, on the traced values: the compiled graph is the
transformed one."""
from aotgrad.func._vmap import vmap
from aotgrad.func._transforms import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, \
    linearize, vjp
from aotgrad.func._functional_call import functional_call, stack_module_state

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp",
           "linearize", "stack_module_state", "vjp", "vmap"]
