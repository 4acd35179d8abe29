"""The op table entry of tapegrad.autograd.Function: a row whose forward already ran in
Python (its kernel only adopts the outputs Python made) and whose backward is Python's
(the sweep pauses there; see autograd/function.py)."""
from .._engine.layout import K_OK, M_REFS, C_NOUTS
from .._engine.lowlevel import ctx_of, meta_of, iargs_of, outs_of
from .opinfo import XY
from .registry import OpDef, register, samples

_M = __name__
FV = 16     # forward-only iargs: the number of outputs, then their ids


def adopt_outputs_fwd(caddr, row):
    C = ctx_of(caddr)
    M = meta_of(C)
    ia = iargs_of(C)
    outs = outs_of(C)
    n = ia[FV]
    for j in range(n):
        o = ia[FV + 1 + j]
        M[o, M_REFS] -= 1       # op_entry counts a wrapper to come; these have theirs
        outs[j] = o
    C[C_NOUTS] = n
    return K_OK


def python_bwd(caddr, row):
    return K_OK                 # never called: the sweep hands these rows to Python


register(OpDef("py_function", "Backward", "python", module=_M, fwd_fn="adopt_outputs_fwd",
               bwd_fn="python_bwd", nin=3, diff=(0, 1, 2)))
# (the node is named after the Function class: MulAddBackward, opinfo.MulAdd)
samples("py_function", "MulAdd(L).apply(x, y)", "MulAdd(L).apply(x, 2 * y)",
        "MulAdd(L).apply(x.t(), y.t())", grad_fn="MulAddBackward",
        replay="an autograd.Function's forward and backward are Python", **XY)
