"""Recurrent layers: RNN, LSTM, GRU and their cells, with PyTorch's parameter names, shapes,
initialisation, gate order and formulas.

>>> lstm = nn.LSTM(10, 20, num_layers=2)
>>> out, (h, c) = lstm(aotgrad.randn(5, 3, 10))
>>> out.shape, h.shape
(aotgrad.Size([5, 3, 20]), aotgrad.Size([2, 3, 20]))

Each layer projects the inputs of all time steps in one contraction before the time loop;
each step then adds one (N, H) x (H, gates) product and the gate arithmetic. All of it is
made of tensor ops, so autograd and `aotgrad.compile` (which unrolls the time loop) need no
special case.
"""
import math
import numbers
import warnings

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import hint, size_list
from aotgrad.nn import functional as F
from aotgrad.nn import init
from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.nn.utils.rnn import PackedSequence, _pack, pad_packed_sequence
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime.factories import empty, tensor, zeros
from aotgrad.runtime.tensor import Tensor

# gates per mode, in PyTorch's order: LSTM (i, f, g, o), GRU (r, z, n)
_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


# ---- one time step (shared by the layers and the cells) --------------------------------------
def _hidden_product(h, w_hh_t, b_hh):
    hp = ops.matmul(h, w_hh_t)
    return hp if b_hh is None else ops.add(hp, b_hh)


def _rnn_step(xp, h, w_hh_t, b_hh, relu):
    pre = ops.add(xp, _hidden_product(h, w_hh_t, b_hh))
    return ops.relu(pre) if relu else ops.tanh(pre)


def _lstm_step(xp, h, c, w_hh_t, b_hh, w_hr_t):
    """gates = xp + h W_hh^T (+ b_hh): i, f, o = sigmoid, g = tanh; c' = f c + i g;
    h' = o tanh(c') (times W_hr^T with a projection)."""
    gates = ops.add(xp, _hidden_product(h, w_hh_t, b_hh))
    n = c.shape[-1]
    s = ops.sigmoid(gates)  # one op for the three sigmoid gates (the g block is unused)
    i, f, o = (shape_ops.narrow(s, -1, k * n, n) for k in (0, 1, 3))
    g = ops.tanh(shape_ops.narrow(gates, -1, 2 * n, n))
    c = ops.add(ops.mul(f, c), ops.mul(i, g))
    h = ops.mul(o, ops.tanh(c))
    if w_hr_t is not None:
        h = ops.matmul(h, w_hr_t)
    return h, c


def _gru_step(xp, h, w_hh_t, b_hh):
    """r, z = sigmoid(x_rz + h_rz); n = tanh(x_n + r (W_hn h + b_hn)); h' = n + z (h - n)."""
    hp = _hidden_product(h, w_hh_t, b_hh)
    n = h.shape[-1]
    rz = ops.sigmoid(ops.add(shape_ops.narrow(xp, -1, 0, 2 * n),
                             shape_ops.narrow(hp, -1, 0, 2 * n)))
    r, z = shape_ops.narrow(rz, -1, 0, n), shape_ops.narrow(rz, -1, n, n)
    new = ops.tanh(ops.add(shape_ops.narrow(xp, -1, 2 * n, n),
                           ops.mul(r, shape_ops.narrow(hp, -1, 2 * n, n))))
    return ops.add(new, ops.mul(z, ops.sub(h, new)))


def _dtype(dtype):
    return dt.float32 if dtype is None else dt.as_dtype(dtype)


def _time_steps(xp, length, batch):
    """The (N, gates) rows of each step of time-major xp (L * N, gates), in two levels of
    slices: the gradient of a slice is padded to the size of what it was cut from, so
    cutting L steps straight from xp would cost L full-size buffers in backward; blocks of
    about sqrt(L) steps cut that to about 2 sqrt(L)."""
    block = max(1, math.isqrt(length))
    steps = []
    for start in range(0, length, block):
        n = min(block, length - start)
        part = shape_ops.narrow(xp, 0, start * batch, n * batch) if n < length else xp
        steps.extend(shape_ops.narrow(part, 0, t * batch, batch) for t in range(n))
    return steps


# ---- multi-layer recurrent networks --------------------------------------------------------
class RNNBase(Module):
    """The shared machinery of RNN, LSTM and GRU: parameters weight_ih_l{k}[_reverse],
    weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k} (and weight_hr_l{k} for a projected LSTM), all
    drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0, device=None,
                 dtype=None):
        super().__init__()
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}")
        if not isinstance(hidden_size, int) or isinstance(hidden_size, bool):
            raise TypeError(f"hidden_size should be of type int, got: "
                            f"{type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable "
                             "projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        dtype = _dtype(dtype)
        self._flat_weights_names, self._all_weights = [], []
        for layer in range(num_layers):
            for direction in range(num_directions):
                layer_input = input_size if layer == 0 else real_hidden * num_directions
                shapes = [("weight_ih", (gate_size, layer_input)),
                          ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                suffix = "_reverse" if direction == 1 else ""
                names = []
                for kind, shape in shapes:
                    name = f"{kind}_l{layer}{suffix}"
                    setattr(self, name, Parameter(empty(*shape, dtype=dtype)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self):
        """A no-op: the weights are never packed into one buffer here."""

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    # -- forward --
    def _num_directions(self):
        return 2 if self.bidirectional else 1

    def _check_input(self, input):
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: expected a Tensor or a PackedSequence input, got "
                            f"{type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.ndim}D "
                             f"tensor instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {hint(input.shape[-1])}")

    def _initial_state(self, hx, size, batch, batched, x, what="hx"):
        """hx as (layers * directions, N, size), zeros when not given; shape-checked."""
        expected = (self.num_layers * self._num_directions(), batch, size)
        if hx is None:
            return zeros(*expected, dtype=x.dtype)
        if batched and hx.ndim != 3:
            raise RuntimeError(f"For batched 3-D input, {what} should also be 3-D but got "
                               f"{hx.ndim}-D tensor")
        if not batched and hx.ndim != 2:
            raise RuntimeError(f"For unbatched 2-D input, {what} should also be 2-D but got "
                               f"{hx.ndim}-D tensor")
        if not batched:
            hx = shape_ops.unsqueeze(hx, 1)
        if tuple(hx.shape) != expected:
            raise RuntimeError(f"Expected hidden size {expected}, got {size_list(hx.shape)}")
        if hx.dtype is not x.dtype:
            raise RuntimeError(f"{type(self).__name__}: input and hidden state must have the "
                               f"same dtype, got {x.dtype.name} and {hx.dtype.name}")
        return hx

    def _run_direction(self, xs, weights, state, reverse, valid=None):
        """One layer in one direction over time-major inputs xs (L, N, in); returns the
        outputs (L, N, out) in time order and the final state. `valid[t]` (packed input):
        an (N, 1) mask of the sequences still running at step t; the others keep their
        state, so each sequence ends (forwards) or starts (backwards) at its own length."""
        w_ih, w_hh = weights["weight_ih"], weights["weight_hh"]
        b_ih, b_hh = weights.get("bias_ih"), weights.get("bias_hh")
        w_hh_t = shape_ops.transpose(w_hh, 0, 1)
        if self.mode == "GRU":
            xp = F.linear(xs, w_ih, b_ih)  # b_hn stays inside r * (W_hn h + b_hn)
            step_bias = b_hh
        else:  # both biases add outside the nonlinearity: fold them into the projection
            xp = F.linear(xs, w_ih, None if b_ih is None else ops.add(b_ih, b_hh))
            step_bias = None
        w_hr = weights.get("weight_hr")
        w_hr_t = None if w_hr is None else shape_ops.transpose(w_hr, 0, 1)
        # time-major rows (L * N, gates): step t is one row slice, no reshape per step
        length, batch = xs.shape[0], xs.shape[1]
        steps = _time_steps(xp.reshape(length * batch, xp.shape[-1]), length, batch)
        order = range(length - 1, -1, -1) if reverse else range(length)
        outs = [None] * length
        if self.mode == "LSTM":
            h, c = state
            for t in order:
                hn, cn = _lstm_step(steps[t], h, c, w_hh_t, step_bias, w_hr_t)
                if valid is not None:
                    hn, cn = ops.where(valid[t], hn, h), ops.where(valid[t], cn, c)
                h, c = hn, cn
                outs[t] = h
            final = (h, c)
        else:
            h = state
            for t in order:
                xt = steps[t]
                if self.mode == "GRU":
                    hn = _gru_step(xt, h, w_hh_t, step_bias)
                else:
                    hn = _rnn_step(xt, h, w_hh_t, step_bias, self.mode == "RNN_RELU")
                h = hn if valid is None else ops.where(valid[t], hn, h)
                outs[t] = h
            final = h
        out = shape_ops.cat(outs, 0) if length > 1 else outs[0]
        return out.reshape(length, batch, out.shape[-1]), final

    def _layer_weights(self, index):
        return {name.split("_l")[0]: getattr(self, name) for name in self._all_weights[index]}

    def _forward_layers(self, x, h0, c0, lengths=None):
        dirs = self._num_directions()
        valid = None if lengths is None else \
            [tensor((lengths > t).reshape(-1, 1)) for t in range(x.shape[0])]
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                k = layer * dirs + d
                h = shape_ops.select(h0, 0, k)
                state = (h, shape_ops.select(c0, 0, k)) if c0 is not None else h
                if x.shape[0] == 0:
                    raise RuntimeError(f"{type(self).__name__}: expected a sequence of at least "
                                       f"one step, got input of shape {size_list(x.shape)}")
                out, final = self._run_direction(x, self._layer_weights(k), state, d == 1,
                                                  valid)
                outs.append(out)
                if c0 is not None:
                    hs.append(final[0])
                    cs.append(final[1])
                else:
                    hs.append(final)
            x = outs[0] if dirs == 1 else shape_ops.cat(outs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, shape_ops.stack(hs, 0), (shape_ops.stack(cs, 0) if c0 is not None else None)

    def _prepare(self, input):
        if isinstance(input, PackedSequence):
            padded, lengths = pad_packed_sequence(input)
            self._check_input(padded)
            return padded, True, lengths.numpy()
        self._check_input(input)
        batched = input.ndim == 3
        if not batched:
            x = shape_ops.unsqueeze(input, 1)
        elif self.batch_first:
            x = shape_ops.transpose(input, 0, 1)
        else:
            x = input
        return x, batched, None

    def _finish(self, out, batched, input, lengths):
        if isinstance(input, PackedSequence):  # packed again as the input was
            return _pack(out, lengths, None if input.sorted_indices is None
                         else input.sorted_indices.numpy())
        if not batched:
            return shape_ops.squeeze(out, 1)
        return shape_ops.transpose(out, 0, 1) if self.batch_first else out

    def forward(self, input, hx=None):
        x, batched, lengths = self._prepare(input)
        h0 = self._initial_state(hx, self.hidden_size, x.shape[1], batched, x)
        out, hn, _ = self._forward_layers(x, h0, None, lengths)
        hn = hn if batched else shape_ops.squeeze(hn, 1)
        return self._finish(out, batched, input, lengths), hn

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu).

    Arguments as PyTorch: (input_size, hidden_size, num_layers=1, nonlinearity='tanh',
    bias=True, batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None);
    forward(input, hx=None) -> (output, h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' "
                             f"or 'relu'.")
        super().__init__(mode, *args, **kwargs)


class LSTM(RNNBase):
    """Long short-term memory, gates (i, f, g, o) in that order in each weight's rows.

    forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n)); with proj_size > 0 the hidden
    state is projected by weight_hr_l{k} (h has proj_size features, c has hidden_size)."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def forward(self, input, hx=None):
        x, batched, lengths = self._prepare(input)
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        if hx is None:
            h0 = self._initial_state(None, real_hidden, x.shape[1], batched, x)
            c0 = self._initial_state(None, self.hidden_size, x.shape[1], batched, x)
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise RuntimeError("LSTM: hx must be a tuple (h_0, c_0)")
            h0 = self._initial_state(hx[0], real_hidden, x.shape[1], batched, x, "hx[0]")
            c0 = self._initial_state(hx[1], self.hidden_size, x.shape[1], batched, x, "hx[1]")
        out, hn, cn = self._forward_layers(x, h0, c0, lengths)
        if not batched:
            hn, cn = shape_ops.squeeze(hn, 1), shape_ops.squeeze(cn, 1)
        return self._finish(out, batched, input, lengths), (hn, cn)


class GRU(RNNBase):
    """Gated recurrent unit, gates (r, z, n): n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
    h' = (1 - z) n + z h. forward(input, hx=None) -> (output, h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


# ---- cells -----------------------------------------------------------------------------------
class RNNCellBase(Module):
    """weight_ih (chunks * hidden, input), weight_hh (chunks * hidden, hidden), bias_ih and
    bias_hh, all U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        dtype = _dtype(dtype)
        self.weight_ih = Parameter(empty(num_chunks * hidden_size, input_size, dtype=dtype))
        self.weight_hh = Parameter(empty(num_chunks * hidden_size, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(empty(num_chunks * hidden_size, dtype=dtype))
            self.bias_hh = Parameter(empty(num_chunks * hidden_size, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _prepare(self, input, hx, what="hx"):
        """(input as 2-D, hx as 2-D or None, whether the input was batched)."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D "
                             f"instead")
        if hx is not None and hx.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got {hx.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {hint(input.shape[-1])} "
                               f"expected {self.input_size}")
        batched = input.ndim == 2
        x = input if batched else shape_ops.unsqueeze(input, 0)
        if hx is not None:
            hx = hx if batched else shape_ops.unsqueeze(hx, 0)
            if tuple(hx.shape) != (x.shape[0], self.hidden_size):
                raise RuntimeError(f"{name}: Expected {what} of shape "
                                   f"{[x.shape[0], self.hidden_size]}, got {size_list(hx.shape)}")
        return x, hx, batched

    def _zeros(self, x):
        return zeros(x.shape[0], self.hidden_size, dtype=x.dtype)

    def _w_hh_t(self):
        return shape_ops.transpose(self.weight_hh, 0, 1)


def _unbatch(t, batched):
    return t if batched else shape_ops.squeeze(t, 0)


class RNNCell(RNNCellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        x, hx, batched = self._prepare(input, hx)
        hx = self._zeros(x) if hx is None else hx
        h = _rnn_step(F.linear(x, self.weight_ih, self.bias_ih), hx, self._w_hh_t(),
                      self.bias_hh, self.nonlinearity == "relu")
        return _unbatch(h, batched)


class LSTMCell(RNNCellBase):
    """forward(input, (h, c)=None) -> (h', c'), gates (i, f, g, o)."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise RuntimeError("LSTMCell: hx must be a tuple (h, c)")
        h0, c0 = (None, None) if hx is None else hx
        x, h0, batched = self._prepare(input, h0, "hx[0]")
        _, c0, _ = self._prepare(input, c0, "hx[1]")
        h0 = self._zeros(x) if h0 is None else h0
        c0 = self._zeros(x) if c0 is None else c0
        h, c = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h0, c0, self._w_hh_t(),
                          self.bias_hh, None)
        return _unbatch(h, batched), _unbatch(c, batched)


class GRUCell(RNNCellBase):
    """forward(input, h=None) -> h', gates (r, z, n)."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, hx, batched = self._prepare(input, hx)
        hx = self._zeros(x) if hx is None else hx
        h = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), hx, self._w_hh_t(),
                      self.bias_hh)
        return _unbatch(h, batched)
