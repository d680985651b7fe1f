"""L-BFGS with an optional strong-Wolfe line search, as torch.optim.LBFGS (`step(closure)`).

>>> model = nn.Linear(3, 2)
>>> opt = optim.LBFGS(model.parameters(), lr=1, line_search_fn="strong_wolfe")
>>> x, y, loss_fn = aotgrad.randn(8, 3), aotgrad.randn(8, 2), nn.MSELoss()
>>> def closure():
...     opt.zero_grad()
...     loss = loss_fn(model(x), y)
...     loss.backward()
...     return loss
>>> loss = opt.step(closure)

The algorithm is PyTorch's (after minFunc): two-loop recursion over the last `history_size`
curvature pairs, a first step of min(1, 1 / |g|_1) * lr, and the same stopping tests. Its
vector algebra runs on flat numpy vectors in the parameters' dtype, with numpy scalars of that
dtype where PyTorch has 0-d tensors, so float32 rounds as PyTorch's does. It needs concrete
values (its loop branches on them): it runs eagerly, not inside a compiled function.

State (on the first parameter, as in PyTorch): "func_evals", "n_iter", "d", "t", "old_dirs",
"old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss", "al"; vectors are stored as
tensors, so a state dict saves and loads like any other.
"""
import numpy as np

from aotgrad.ir.core import current_builder
from aotgrad.optim._update import check_nonnegative
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime.factories import tensor
from aotgrad.runtime.grad_mode import enable_grad, no_grad
from aotgrad.runtime.tensor import Tensor

_VECTORS = ("d", "prev_flat_grad")
_VECTOR_LISTS = ("old_dirs", "old_stps")
_SCALAR_LISTS = ("ro", "al")


class LBFGS(Optimizer):
    """One parameter group only. `max_eval` defaults to max_iter * 5 // 4; `line_search_fn`
    is None (fixed step lr) or "strong_wolfe"."""

    def __init__(self, params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):
        check_nonnegative(lr=lr)
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change,
                                      history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    # ---- flat views of the parameters and their gradients ------------------------------------
    def _dtype(self):
        return np.result_type(*[p.dtype.np for p in self._params])

    def _gather_flat_grad(self):
        dtype = self._dtype()
        return np.concatenate([
            np.zeros(p.numel(), dtype) if p.grad is None
            else np.asarray(p.grad.detach().numpy(), dtype).reshape(-1)
            for p in self._params])

    def _add_grad(self, step_size, update):
        offset = 0
        for p in self._params:
            n = p.numel()
            piece = update[offset:offset + n].reshape(tuple(p.shape)).astype(p.dtype.np)
            p.add_(tensor(piece), alpha=float(step_size))
            offset += n

    def _clone_param(self):
        return [np.array(p.detach().numpy(), copy=True) for p in self._params]

    def _set_param(self, values):
        for p, v in zip(self._params, values):
            p.copy_(tensor(v))

    def _directional_evaluate(self, closure, x, t, d):
        self._add_grad(t, d)
        with enable_grad():
            loss = float(closure())
        flat_grad = self._gather_flat_grad()
        self._set_param(x)
        return loss, flat_grad

    # ---- the step -------------------------------------------------------------------------------
    def step(self, closure):
        if current_builder() is not None:
            raise RuntimeError("LBFGS.step branches on the loss and gradient values: call it "
                               "outside a compiled function (compile the closure's model "
                               "instead)")
        with no_grad():
            return self._step(closure)

    def _step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]
        scalar = self._dtype().type
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if np.abs(flat_grad).max() <= tolerance_grad:
            return orig_loss

        s = _unpack(state)
        d, t = s.get("d"), s.get("t")
        old_dirs, old_stps, ro = s.get("old_dirs"), s.get("old_stps"), s.get("ro")
        H_diag, prev_flat_grad, prev_loss = s.get("H_diag"), s.get("prev_flat_grad"), \
            s.get("prev_loss")
        al = s.get("al")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            # the search direction
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                y = flat_grad - prev_flat_grad
                step_vec = d * scalar(t)
                ys = y.dot(step_vec)
                if ys > 1e-10:  # keep the pair only where the curvature condition holds
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(step_vec)
                    ro.append(scalar(1.0) / ys)
                    H_diag = ys / y.dot(y)
                num_old = len(old_dirs)
                if al is None:
                    al = [None] * history_size
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q = q + old_dirs[i] * -al[i]
                d = r = q * (H_diag if isinstance(H_diag, np.generic) else scalar(H_diag))
                for i in range(num_old):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r += old_stps[i] * (al[i] - be_i)
            prev_flat_grad = flat_grad.copy()
            prev_loss = loss
            # the step length
            if state["n_iter"] == 1:
                t = min(1.0, scalar(1.0) / np.abs(flat_grad).sum()) * lr
            else:
                t = lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:  # not a descent direction
                break
            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("only 'strong_wolfe' is supported")
                x_init = self._clone_param()

                def obj_func(x, t, d):
                    return self._directional_evaluate(closure, x, t, d)

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x_init, t, d, loss, flat_grad, gtd,
                    max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = np.abs(flat_grad).max() <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:
                    # re-evaluate unless this was the last iteration
                    with enable_grad():
                        loss = float(closure())
                    flat_grad = self._gather_flat_grad()
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * scalar(t)).max() <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(_pack(dict(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro,
                                H_diag=H_diag, prev_flat_grad=prev_flat_grad,
                                prev_loss=prev_loss, al=al)))
        if al is None:
            state.pop("al", None)
        return orig_loss


def _pack(values):
    """numpy vectors and scalars -> tensors (0-d for PyTorch's 0-d tensors), for the state."""
    out = {}
    for k, v in values.items():
        if isinstance(v, np.ndarray):
            out[k] = tensor(v)
        elif isinstance(v, list):
            out[k] = [tensor(np.asarray(e)) if isinstance(e, (np.ndarray, np.generic)) else e
                      for e in v]
        elif isinstance(v, np.generic):
            out[k] = tensor(np.asarray(v)) if k == "H_diag" else v.item()
        else:
            out[k] = v
    return out


def _unpack(state):
    """The state's tensors -> numpy vectors and scalars of their dtype."""
    out = {}
    for k, v in state.items():
        if isinstance(v, Tensor):
            a = np.array(v.detach().numpy(), copy=True)
            out[k] = a if a.ndim else a[()]
        elif isinstance(v, list):
            out[k] = [_unpack({0: e})[0] for e in v]
        else:
            out[k] = v
    return out


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clipped to bounds
    (default: the interval between x1 and x2); the midpoint when the cubic has none."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    """A step t satisfying the strong Wolfe conditions along d (bracketing, then zoom with
    cubic interpolation): returns (f(t), g(t), t, number of evaluations)."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = g_new.dot(d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    # bracket an interval containing a point satisfying the conditions
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        # extrapolate
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
    if ls_iter == max_ls:  # reached the maximum number of iterations
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket until a point satisfies the conditions
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        # keep away from the bracket's ends (the safeguard of Nocedal & Wright)
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals
