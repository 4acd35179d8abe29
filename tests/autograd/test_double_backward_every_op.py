"""Every op of the op table differentiated twice, driven by the registry: the first
float64 sample of each op whose gradient is checked (tests/ops/test_every_op.py) goes
through gradgradcheck (the recorded gradient's gradient against finite differences of
the first derivative). An op whose double backward is not written yet must raise
NotImplementedError naming its grad_fn, and be listed in NOT_YET: the list is exact (an op
that starts to pass must leave it)."""
import re

import pytest

import tapegrad as tg
from tapegrad.ops.registry import OPS
from tests.ops.test_every_op import arrays, differentiable, evaluate, flat, tensors

NOT_YET = {"adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool2d", "batch_norm",
           "binary_cross_entropy", "cdist", "col2im", "conv_transpose", "convolution",
           "copy_slices", "cumprod", "digamma", "embedding_bag", "embedding_bag_max",
           "erfinv", "group_norm", "gru", "im2col", "lgamma", "linalg_cholesky",
           "linalg_eigh", "linalg_qr", "linalg_slogdet", "linalg_solve",
           "linalg_solve_triangular", "linalg_svd", "logcumsumexp", "lstm", "max_pool2d",
           "pixel_shuffle", "pixel_unshuffle", "polygamma", "prod", "prod_dim",
           "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
           "replication_pad2d", "replication_pad3d", "rnn_relu", "rnn_tanh",
           "upsample_bilinear2d", "upsample_linear1d", "upsample_nearest1d",
           "upsample_nearest2d", "upsample_nearest_exact1d", "upsample_nearest_exact2d"}


def _first_grad_samples():
    params = []
    for op in OPS:
        if op.info is None:
            continue
        for k, s in enumerate(op.info.samples):
            if s.grad is True and "float64" in s.dtypes:
                params.append(pytest.param(op, k, id=op.name))
                break
    return params


@pytest.mark.parametrize("op, k", _first_grad_samples())
def test_double_backward(op, k):
    sample = op.info.samples[k]
    ins = tensors(tg, sample, arrays(op, k, sample), "float64")
    names = list(ins)

    def fn(*args):
        outs = flat(evaluate(tg, sample, dict(zip(names, args))))
        return [o if o.dtype is tg.float64 else o.double()     # (float32 results: x.float())
                for o in differentiable(outs) if o.dtype.is_floating_point]
    # a float32 result rounds to ~6e-8 relative, which a 1e-6 step cannot resolve
    coarse = any(o.dtype is tg.float32 for o in flat(evaluate(tg, sample, ins)))
    try:
        ok = tg.autograd.gradgradcheck(fn, list(ins.values()), raise_exception=False,
                                       eps=1e-3 if coarse else 1e-6)
    except NotImplementedError as e:
        m = re.search(r"double backward of (\w+)", str(e))
        assert m, str(e)
        assert op.name in NOT_YET, f"{op.name}: {e}"
        return
    assert op.name not in NOT_YET, f"{op.name} passes now: take it off NOT_YET"
    assert ok, f"{sample.call}: second derivatives differ from finite differences"
