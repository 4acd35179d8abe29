"""tapegrad.nn: the recurrent modules RNN, LSTM and GRU (PyTorch's names, signatures,
defaults, parameter names and initialisation).

Each layer (both directions) is one row of the recurrent op family (ops/recurrent.py),
whose compiled kernels run every time step and backpropagation through time; the layer's
parameters reach it flattened into one vector (a concatenation, through which their
gradients flow back), its output is one flat tensor viewed as output, h_n and c_n.
Dropout between layers is F.dropout on each layer's output, as PyTorch applies it (the
same draws from the same generator). lstm, gru, rnn_tanh and rnn_relu here are PyTorch's
torch.lstm & co (the functions its modules call).
"""
import math
import numbers
import warnings

import numpy as np

from .._engine import sizes as _sizes
from .._engine.state import GRAD_MODE
from .._front import creation as _creation
from .._front.indexing import _constant, _view
from .._front.indexing import cat as _cat
from .._front.tensor import Tensor, _numpy_view, _wrap
from .._front.tensor import run as _run
from ..ops import recurrent as _R
from ..ops.registry import BY_NAME
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter
from .utils.rnn import PackedSequence

__all__ = ["GRU", "LSTM", "RNN", "RNNBase"]

_MODES = {"RNN_TANH": _R.RNN_TANH, "RNN_RELU": _R.RNN_RELU, "LSTM": _R.LSTM, "GRU": _R.GRU}
_OPS = {_R.RNN_TANH: BY_NAME["rnn_tanh"], _R.RNN_RELU: BY_NAME["rnn_relu"],
        _R.LSTM: BY_NAME["lstm"], _R.GRU: BY_NAME["gru"]}


def _flat(params):
    """The parameters flattened and concatenated (in their order)."""
    flat = [p.reshape(-1) for p in params]
    return flat[0] if len(flat) == 1 else _cat(flat)


def _piece(y, off, shape):
    """A contiguous view of the flat output y at element off, shaped shape."""
    st, s = [], 1
    for n in reversed(shape):
        st.append(s)
        s *= n
    st = st[::-1]
    return _view(y, "view_strided", list(shape), st, off, st, off)   # (y is fresh: offset 0)


def _layer(mode, x, params, h0, c0, bs, layout, steps, batch, hidden, proj, ndir, bias):
    """One layer over x (2-D, rows in the layout's order): (output 2-D, h_n, c_n)."""
    op = _OPS[mode]
    P = proj if proj else hidden
    w = _flat(params)
    parts = []
    if h0 is not None:
        parts.append(h0.reshape(-1))
        if mode == _R.LSTM:
            parts.append(c0.reshape(-1))
    if bs is not None:
        parts.append(bs)
    s = None if not parts else parts[0] if len(parts) == 1 else _cat(parts)
    save = bool(GRAD_MODE.on) and (x.requires_grad or w.requires_grad
                                   or (s is not None and s.requires_grad))
    inp = x.shape[1]
    n = x.shape[0]
    isz = x.dtype.itemsize
    # the output, the workspace the row keeps and the backward's scratch, refused with
    # PyTorch's words before any kernel when they cannot be had
    _sizes.check_new([n * ndir * P + ndir * batch * (P + hidden)], isz)
    _sizes.check_new([ndir, n, 7 * hidden + 2 * P], isz)
    _sizes.check_new([2, n, 4 * hidden + P], isz)
    iargs = op.pack(mode=mode, steps=steps, batch=batch, input=inp, hidden=hidden,
                    proj=proj, ndir=ndir, bias=int(bias), layout=layout, save=int(save),
                    state=int(h0 is not None))
    y = _wrap(_run(op, x._i, w._i, c=-1 if s is None else s._i, iargs=iargs))
    out = _piece(y, 0, (n, ndir * P))
    hn = _piece(y, n * ndir * P, (ndir, batch, P))
    cn = _piece(y, n * ndir * P + ndir * batch * P, (ndir, batch, hidden)) \
        if mode == _R.LSTM else None
    return out, hn, cn


def _impl(mode, input, hx, cx, params, has_biases, num_layers, dropout, train,
          bidirectional, batch_first, batch_sizes, proj, hidden):
    """The stacked layers over input (3-D, or packed data with batch_sizes, a NumPy
    array); hx/cx: (num_layers * ndir, B, *) initial states or None (zeros). Returns
    (output, h_n, c_n)."""
    ndir = 2 if bidirectional else 1
    k = len(params) // (num_layers * ndir)
    _check_layers(mode, input, hx, cx, params, k, num_layers, ndir, batch_first, batch_sizes,
                  proj, hidden)
    if batch_sizes is not None:
        layout = _R.PACKED
        steps = int(batch_sizes.size)
        batch = int(batch_sizes[0]) if steps else 0
        bs = _constant(lambda: _creation.tensor(batch_sizes.astype(
            np.float32 if input.dtype.itemsize == 4 else np.float64)))
        x = input.contiguous()
    else:
        layout = _R.BATCH_FIRST if batch_first else _R.TIME_MAJOR
        steps = input.shape[1] if batch_first else input.shape[0]
        batch = input.shape[0] if batch_first else input.shape[1]
        bs = None
        if steps == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        x = input.contiguous().reshape(steps * batch, input.shape[2])
    shape3 = None if batch_sizes is not None else (
        (batch, steps) if batch_first else (steps, batch))
    hs, cs = [], []
    for layer in range(num_layers):
        lp = params[layer * ndir * k:(layer + 1) * ndir * k]
        h0 = None if hx is None else hx[layer * ndir:(layer + 1) * ndir]
        c0 = None if cx is None else cx[layer * ndir:(layer + 1) * ndir]
        if h0 is not None and mode == _R.LSTM and c0 is None:
            c0 = _constant(lambda: _creation.zeros(ndir, batch, hidden, dtype=input.dtype))
        if h0 is None and c0 is not None:
            h0 = _constant(lambda: _creation.zeros(ndir, batch, proj or hidden,
                                                   dtype=input.dtype))
        x, hn, cn = _layer(mode, x, lp, h0, c0, bs, layout, steps, batch, hidden, proj, ndir,
                           has_biases)
        hs.append(hn)
        cs.append(cn)
        if dropout > 0 and train and layer < num_layers - 1:
            x = F.dropout(x, dropout, True)
    out = x if shape3 is None else x.reshape(*shape3, x.shape[1])
    h_n = hs[0] if num_layers == 1 else _cat(hs)
    c_n = None if mode != _R.LSTM else (cs[0] if num_layers == 1 else _cat(cs))
    return out, h_n, c_n


def _check_layers(mode, input, hx, cx, params, k, num_layers, ndir, batch_first, batch_sizes,
                  proj, hidden):
    """Every size and dtype the kernels rely on, checked before any of them runs (the
    modules' own checks come first, with PyTorch's words; these catch what only the
    functions (lstm, gru, ...) or a hand-made PackedSequence can get wrong)."""
    if not isinstance(input, Tensor) or not input.dtype.is_floating_point:
        raise RuntimeError("expected a floating point input tensor")
    packed = batch_sizes is not None
    if input.ndim != (2 if packed else 3):
        raise RuntimeError(f"input must have {2 if packed else 3} dimensions, got "
                           f"{input.ndim}")
    if packed:
        if int(batch_sizes.sum()) != input.shape[0]:
            raise RuntimeError(f"the batch sizes ({int(batch_sizes.sum())} rows in all) do not "
                               f"match the packed data's {input.shape[0]} rows")
        batch = int(batch_sizes[0]) if batch_sizes.size else 0
    else:
        batch = input.shape[0] if batch_first else input.shape[1]
    P = proj if proj else hidden
    gates = {_R.LSTM: 4, _R.GRU: 3}.get(mode, 1) * hidden
    for layer in range(num_layers):
        inp = input.shape[-1] if layer == 0 else ndir * P
        for d in range(ndir):
            ps = params[(layer * ndir + d) * k:(layer * ndir + d + 1) * k]
            want = [(gates, inp), (gates, P)]
            if k in (4, 5):
                want += [(gates,), (gates,)]
            if proj:
                want.append((proj, hidden))
            for p, shape in zip(ps, want):
                if not isinstance(p, Tensor) or p.dtype != input.dtype:
                    raise RuntimeError("mat1 and mat2 must have the same dtype, but got "
                                       f"{input.dtype} and "
                                       f"{getattr(p, 'dtype', type(p).__name__)}")
                if tuple(p.shape) != shape:
                    if layer == 0 and len(shape) == 2 and shape[1] == inp and p.ndim == 2 \
                            and p.shape[0] == gates:
                        raise RuntimeError(f"input.size(-1) must be equal to input_size. "
                                           f"Expected {p.shape[1]}, got {inp}")
                    raise RuntimeError(f"a recurrent weight of shape {list(p.shape)} where "
                                       f"{list(shape)} was expected")
    for h, size, what in ((hx, P, "hidden"), (cx, hidden, "cell")):
        if h is None:
            continue
        want = (num_layers * ndir, batch, size)
        if not isinstance(h, Tensor) or tuple(h.shape) != want:
            raise RuntimeError(f"Expected {what} size {want}, got "
                               f"{list(getattr(h, 'shape', ()))}")
        if h.dtype != input.dtype:
            raise RuntimeError(f"Expected the {what} state's dtype {h.dtype} to be the input's "
                               f"{input.dtype}")


def _batch_sizes_array(batch_sizes):
    bs = np.asarray(_numpy_view(batch_sizes)).astype(np.int64).reshape(-1)
    if bs.size and (bs[0] < 1 or np.any(bs < 1) or np.any(bs[1:] > bs[:-1])):
        raise RuntimeError("batch_sizes must be a non-increasing sequence of positive "
                           "integers (as pack_padded_sequence makes them)")
    return bs


def _functional(mode, name, args):
    """torch.lstm / gru / rnn_tanh / rnn_relu: (input, hx, params, has_biases, num_layers,
    dropout, train, bidirectional, batch_first) or the packed form (data, batch_sizes, hx,
    params, has_biases, num_layers, dropout, train, bidirectional)."""
    if len(args) != 9:
        raise TypeError(f"{name}() takes 9 arguments ({len(args)} given)")
    packed = isinstance(args[1], Tensor) and isinstance(args[3], (list, tuple))
    if packed:
        input, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidir = args
        batch_first = False
        bs = _batch_sizes_array(batch_sizes)
    else:
        input, hx, params, has_biases, num_layers, dropout, train, bidir, batch_first = args
        bs = None
    if mode == _R.LSTM:
        if not isinstance(hx, (list, tuple)) or len(hx) != 2:
            raise RuntimeError("lstm expects two hidden states")
        h0, c0 = hx
    else:
        h0, c0 = hx, None
    params = list(params)
    ndir = 2 if bidir else 1
    per = len(params) // max(num_layers * ndir, 1)
    if per * num_layers * ndir != len(params) or per not in ((4, 5) if has_biases else (2, 3)):
        raise RuntimeError(f"{name}: wrong number of parameters ({len(params)}) for "
                           f"{num_layers} layers{' (bidirectional)' if bidir else ''}")
    proj = params[per - 1].shape[0] if per in (3, 5) else 0
    hidden = params[1].shape[1] if not proj else params[per - 1].shape[1]
    if mode != _R.LSTM:
        hidden = params[1].shape[1]
    out, h_n, c_n = _impl(mode, input, h0, c0, params, bool(has_biases), int(num_layers),
                          float(dropout), bool(train), bool(bidir), bool(batch_first), bs,
                          proj, hidden)
    return (out, h_n, c_n) if mode == _R.LSTM else (out, h_n)


def lstm(*args):
    """torch.lstm: the LSTM's layers as nn.LSTM runs them; returns (output, h_n, c_n)."""
    return _functional(_R.LSTM, "lstm", args)


def gru(*args):
    """torch.gru: the GRU's layers as nn.GRU runs them; returns (output, h_n)."""
    return _functional(_R.GRU, "gru", args)


def rnn_tanh(*args):
    """torch.rnn_tanh: an Elman RNN with tanh as nn.RNN runs it; returns (output, h_n)."""
    return _functional(_R.RNN_TANH, "rnn_tanh", args)


def rnn_relu(*args):
    """torch.rnn_relu: an Elman RNN with relu as nn.RNN runs it; returns (output, h_n)."""
    return _functional(_R.RNN_RELU, "rnn_relu", args)


def _permute(hx, permutation):
    return hx if permutation is None else hx.index_select(1, permutation)


class RNNBase(Module):
    """Base class of RNN, LSTM and GRU: the parameters of every layer and direction
    (weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, weight_hr_l{k}, with
    _reverse for the second direction), in PyTorch's order and initialisation."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        from .layers import _factory
        super().__init__()
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the "
                             "probability of an element being zeroed")
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, "
                          "so non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", stacklevel=2)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first should be of type bool, got: "
                            f"{type(batch_first).__name__}")
        if not isinstance(input_size, int):
            raise TypeError(f"input_size should be of type int, got: "
                            f"{type(input_size).__name__}")
        if input_size <= 0:
            raise ValueError("input_size must be greater than zero")
        if not isinstance(hidden_size, int):
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
        if mode not in _MODES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        gate_size = {"LSTM": 4, "GRU": 3}.get(mode, 1) * hidden_size
        dt = _factory(device, dtype, type(self).__name__)
        self._flat_weights_names = []
        self._all_weights = []
        for layer in range(num_layers):
            for direction in range(num_directions):
                real_hidden = proj_size if proj_size > 0 else hidden_size
                layer_input = input_size if layer == 0 else real_hidden * num_directions
                shapes = [(gate_size, layer_input), (gate_size, real_hidden)]
                names = ["weight_ih_l{}{}", "weight_hh_l{}{}"]
                if bias:
                    shapes += [(gate_size,), (gate_size,)]
                    names += ["bias_ih_l{}{}", "bias_hh_l{}{}"]
                if proj_size > 0:
                    shapes.append((proj_size, hidden_size))
                    names.append("weight_hr_l{}{}")
                suffix = "_reverse" if direction == 1 else ""
                names = [n.format(layer, suffix) for n in names]
                for n, shape in zip(names, shapes):
                    setattr(self, n, Parameter(_creation.empty(*shape, dtype=dt)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    @property
    def _flat_weights(self):
        return [getattr(self, n) if hasattr(self, n) else None
                for n in self._flat_weights_names]

    def flatten_parameters(self):
        """A no-op, as in PyTorch on the CPU (its flat weight buffer exists for cuDNN)."""

    def reset_parameters(self):
        """Re-initialise every parameter from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)),
        in registration order."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def check_input(self, input, batch_sizes):
        """PyTorch's checks of input's dtype, rank and feature size."""
        w = self._flat_weights[0]
        if input.dtype != w.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({w.dtype}). Convert input: input.to({w.dtype}), or convert "
                             f"model: model.to({input.dtype})")
        expected = 2 if batch_sizes is not None else 3
        if input.dim() != expected:
            raise RuntimeError(f"input must have {expected} dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.size(-1)}")

    def get_expected_hidden_size(self, input, batch_sizes):
        """(num_layers * num_directions, batch, proj_size or hidden_size)."""
        if batch_sizes is not None:
            mini_batch = int(batch_sizes[0])
        else:
            mini_batch = input.size(0) if self.batch_first else input.size(1)
        num_directions = 2 if self.bidirectional else 1
        return (self.num_layers * num_directions, mini_batch,
                self.proj_size if self.proj_size > 0 else self.hidden_size)

    def check_hidden_size(self, hx, expected_hidden_size,
                          msg="Expected hidden size {}, got {}"):
        """Raise PyTorch's RuntimeError when hx's shape is not the expected one."""
        if tuple(hx.size()) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.size())))

    def check_forward_args(self, input, hidden, batch_sizes):
        """Check input and the initial hidden state."""
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def permute_hidden(self, hx, permutation):
        """hx with its batch dim reordered by permutation (None: unchanged)."""
        return _permute(hx, permutation)

    def _check_state_dtype(self, input, states):
        """PyTorch's errors for initial states of another dtype than input's (its LSTM's
        float32 path is oneDNN's, whose words differ); an LSTM's float64 run takes a c_0
        of another dtype, promoted."""
        names = {"float32": "Float", "float64": "Double"}
        states = list(states)
        for k, h in enumerate(states):
            if h is None or h.dtype == input.dtype:
                continue
            if self.mode == "LSTM" and str(input.dtype).endswith("float32"):
                raise RuntimeError("get_mkldnn_dtype: unsupported data type")
            if k == 1:
                states[1] = h.to(input.dtype)
                continue
            raise RuntimeError(
                "mat1 and mat2 must have the same dtype, but got "
                f"{names.get(str(h.dtype).split('.')[-1], h.dtype)} and "
                f"{names.get(str(input.dtype).split('.')[-1], input.dtype)}")
        return states

    def extra_repr(self):
        """Sizes and the options that differ from their defaults."""
        s = "{input_size}, {hidden_size}"
        if self.proj_size != 0:
            s += ", proj_size={proj_size}"
        if self.num_layers != 1:
            s += ", num_layers={num_layers}"
        if self.bias is not True:
            s += ", bias={bias}"
        if self.batch_first is not False:
            s += ", batch_first={batch_first}"
        if self.dropout != 0:
            s += ", dropout={dropout}"
        if self.bidirectional is not False:
            s += ", bidirectional={bidirectional}"
        return s.format(**self.__dict__)

    @property
    def all_weights(self):
        """The parameters, one list per layer and direction."""
        return [[getattr(self, w) for w in ws] for ws in self._all_weights]

    def _run(self, input, hx, cx, batch_sizes):
        bs = None if batch_sizes is None else _batch_sizes_array(batch_sizes)
        return _impl(_MODES[self.mode], input, hx, cx, self._flat_weights, self.bias,
                     self.num_layers, self.dropout, self.training, self.bidirectional,
                     self.batch_first, bs, self.proj_size, self.hidden_size)

    def _unpack(self, input):
        if isinstance(input, PackedSequence):
            data, batch_sizes, sorted_indices, unsorted_indices = input
            return data, batch_sizes, sorted_indices, unsorted_indices, True
        return input, None, None, None, False


class RNN(RNNBase):
    """An Elman RNN, h_t = tanh(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh) (or relu), over
    num_layers layers. RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh',
    bias=True, batch_first=False, dropout=0.0, bidirectional=False, device=None,
    dtype=None); forward(input, hx=None) returns (output, h_n)."""

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
                             "or 'relu'.")
        super().__init__(mode, *args, **kwargs)

    def forward(self, input, hx=None):
        """(output, h_n) over input (L, N, H_in), (N, L, H_in) with batch_first, (L, H_in)
        unbatched, or a PackedSequence (then output is one)."""
        return _rnn_forward(self, input, hx)


class GRU(RNNBase):
    """A gated recurrent unit over num_layers layers: r, z, n gates, h_t = (1 - z) * n +
    z * h_(t-1). GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
    dropout=0.0, bidirectional=False, device=None, dtype=None); forward(input, hx=None)
    returns (output, h_n)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx=None):
        """(output, h_n) over input (L, N, H_in), (N, L, H_in) with batch_first, (L, H_in)
        unbatched, or a PackedSequence (then output is one)."""
        return _rnn_forward(self, input, hx)


def _rnn_forward(self, input, hx):
    """RNN's and GRU's forward, as PyTorch's."""
    name = "RNN" if self.mode.startswith("RNN") else "GRU"
    input, batch_sizes, sorted_indices, unsorted_indices, packed = self._unpack(input)
    is_batched = True
    batch_dim = 0 if self.batch_first else 1
    if packed:
        if hx is not None:
            hx = self.permute_hidden(hx, sorted_indices)
    else:
        if input.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D "
                             + ("tensor instead" if name == "RNN" else "instead"))
        is_batched = input.dim() == 3
        if not is_batched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                if hx.dim() != 2:
                    raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but "
                                       f"got {hx.dim()}-D tensor")
                hx = hx.unsqueeze(1)
        elif hx is not None and hx.dim() != 3:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got "
                               f"{hx.dim()}-D tensor")
    if hx is not None:
        self.check_forward_args(input, hx, batch_sizes)
        hx = self._check_state_dtype(input, (hx,))[0]
    else:
        self.check_input(input, batch_sizes)
    output, hidden, _ = self._run(input, hx, None, batch_sizes)
    if packed:
        return (PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices),
                self.permute_hidden(hidden, unsorted_indices))
    if not is_batched:
        output = output.squeeze(batch_dim)
        hidden = hidden.squeeze(1)
    return output, hidden


class LSTM(RNNBase):
    """A long short-term memory network over num_layers layers: gates i, f, g, o, c_t =
    f * c_(t-1) + i * g, h_t = o * tanh(c_t) (projected by W_hr when proj_size > 0).
    LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0, device=None, dtype=None); forward(input, hx=None)
    returns (output, (h_n, c_n))."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def get_expected_cell_size(self, input, batch_sizes):
        """(num_layers * num_directions, batch, hidden_size)."""
        if batch_sizes is not None:
            mini_batch = int(batch_sizes[0])
        else:
            mini_batch = input.size(0) if self.batch_first else input.size(1)
        num_directions = 2 if self.bidirectional else 1
        return (self.num_layers * num_directions, mini_batch, self.hidden_size)

    def check_forward_args(self, input, hidden, batch_sizes):
        """Check input, h_0 and c_0."""
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden[0], self.get_expected_hidden_size(input, batch_sizes),
                               "Expected hidden[0] size {}, got {}")
        self.check_hidden_size(hidden[1], self.get_expected_cell_size(input, batch_sizes),
                               "Expected hidden[1] size {}, got {}")

    def permute_hidden(self, hx, permutation):
        """(h, c) with their batch dim reordered by permutation (None: unchanged)."""
        if permutation is None:
            return hx
        return _permute(hx[0], permutation), _permute(hx[1], permutation)

    def forward(self, input, hx=None):
        """(output, (h_n, c_n)) over input (L, N, H_in), (N, L, H_in) with batch_first,
        (L, H_in) unbatched, or a PackedSequence (then output is one)."""
        input, batch_sizes, sorted_indices, unsorted_indices, packed = self._unpack(input)
        is_batched = True
        batch_dim = 0 if self.batch_first else 1
        if packed:
            if hx is not None:
                hx = self.permute_hidden(hx, sorted_indices)
        else:
            if input.dim() not in (2, 3):
                raise ValueError(f"LSTM: Expected input to be 2D or 3D, got {input.dim()}D "
                                 "instead")
            is_batched = input.dim() == 3
            if not is_batched:
                input = input.unsqueeze(batch_dim)
            if hx is None:
                self.check_input(input, batch_sizes)
            else:
                if is_batched:
                    if hx[0].dim() != 3 or hx[1].dim() != 3:
                        raise RuntimeError("For batched 3-D input, hx and cx should also be "
                                           f"3-D but got ({hx[0].dim()}-D, {hx[1].dim()}-D) "
                                           "tensors")
                else:
                    if hx[0].dim() != 2 or hx[1].dim() != 2:
                        raise RuntimeError("For unbatched 2-D input, hx and cx should also be "
                                           f"2-D but got ({hx[0].dim()}-D, {hx[1].dim()}-D) "
                                           "tensors")
                    hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
                self.check_forward_args(input, hx, batch_sizes)
        if hx is not None:
            hx = tuple(self._check_state_dtype(input, hx))
        elif packed:
            self.check_input(input, batch_sizes)
        output, h_n, c_n = self._run(input, None if hx is None else hx[0],
                                     None if hx is None else hx[1], batch_sizes)
        if packed:
            return (PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices),
                    self.permute_hidden((h_n, c_n), unsorted_indices))
        if not is_batched:
            output = output.squeeze(batch_dim)
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return output, (h_n, c_n)
