"""The replay executor: one compiled call runs a recorded step's program (forward rows,
backward sweep, optimizer updates) for k steps.

It calls the engine's own `op_entry` and `sweep` through their native addresses, so a
replayed step does exactly what the eager step did (same kernels, same version checks,
same errors), minus Python. Slots hold tensor ids: arguments and outside tensors are
borrowed, everything the program makes is owned by its slot until an I_FREE (the last
use) or until it is handed back to Python as a returned value.
"""

from .._engine.layout import (IA_IN2, OPF_INPLACE, MODE_BACKWARD, M_GRAD, M_REFS, M_DTYPE,
                              M_NUMEL, M_NDIM, M_FLAGS, M_ROW, M_SHAPE, M_STRIDE, MAXD,
                              C_META_CAP, C_LIVE_META, C_STOR_CAP, C_LIVE_STOR, C_NOUTS,
                              C_PLAN, C_PLANN, C_PLANK, E_GROW_META, E_GROW_STOR, F64, E_NOMEM,
                              E_FALLBACK)
from .._engine.lowlevel import (jit, jit_entry, ctx_of, meta_of, iargs_of, outs_of, i64_at,
                                f64_at, u8_at, call_native_op, call_native_sweep,
                                call_native_i4, call_native_i2, call_native_new,
                                call_native_fill)
from .._engine.core import data_addr, bump_version
from ..optim._kernels import table_stale

# instructions: [code, length, ...]
I_OP = 1        # op, a, b, c (slots or -1), s bits, flags, nouts, niargs, outs..., iargs...
I_SWEEP = 2     # nroots, retain, roots..., seeds (slot or -1: ones)...
I_OPT = 3       # native address, ids table address, rows, hyper-parameters address,
                # address and count of the group's parameters the table left out
I_FREE = 4      # slots...
I_ALIAS = 5     # kind (0 detach, 1 .data), source, destination
I_GRAD = 6      # tensor, destination: the tensor's .grad
I_GRADNONE = 7  # tensor, 1: zero it in place / 0: .grad = None
I_RAND = 8      # destination, dtype, ndim, keep bits, scale bits, generator index,
                # shape... (H_SEEDS: the generators' state addresses, per step)
I_IADD = 9      # int64 tensor (contiguous), value: t += value (BatchNorm's batch counter)
I_ALT = 10      # skip: follows an I_OP of a fused op; the instructions it replaced come
                # next, `skip` words: jumped over when the fused op ran, run when it
                # answered E_FALLBACK (its operands are not the ones it covers)
I_HOST = 11     # index of a host callable (Program.host): the call stops with E_HOST,
                # Python calls it and resumes at the next instruction

# header H[...]: what a call runs
H_STEPS, H_NARGS, H_ARGSLOTS, H_ARGIDS, H_NRET, H_RETSLOTS, H_RETIDS, H_RETOWN, \
    H_OPFN, H_SWEEPFN, H_SEEDS, H_NSEEDS, H_STATE, H_PROG, H_NPROG, H_SLOTS, \
    H_NSLOTS, H_RELEASE, H_DETACH, H_DATA, H_NEW, H_FILL, H_GUARD, H_PLAN, H_PLANN = range(25)
HW = 26
# (the engine's functions are called through their native addresses, H_OPFN..H_FILL: the
# executor compiles only its own loop, a few seconds, and never a copy of the engine)
# H[H_PLAN], H[H_PLANN]: the memory plan (address, allocations; 0: none), put in the
# engine's ctx for the call (Python clears them after a call that stopped on a status)
# argument guards at H[H_GUARD] (0: none): [nargs, flag mask, then per argument GW
# values: ndim, dtype, flags & mask, is a leaf, shape[MAXD], strides[MAXD], the first
# argument with the same tensor]: what the plan's guard key says of its arguments
GW = 5 + 2 * MAXD
# state S[...]: where a call stopped (a status Python must handle first), so it can resume
# (a call that ends resets it: the next one starts from the beginning)
S_STEP, S_PC, S_DETAIL = 0, 1, 2

E_NO_GRAD = -101        # the program reads .grad of a tensor that has none (I_GRAD)
E_OPTIMIZER = -102      # an optimizer kernel refused (S_DETAIL: its status)
E_OPT_STALE = -103      # the parameters with a gradient are not the recorded ones: Python
                        # runs that group's step eagerly (and the next call records again)
E_GUARD = -104          # an argument is not what the plan was recorded for: nothing ran
E_HOST = -105           # an I_HOST: Python calls the host callable, then resumes after it


@jit
def _args_match(C, G, argids, steps, nargs):
    """Whether every step's argument tensors match the guard table."""
    M = meta_of(C)
    mask = G[1]
    for s in range(steps):
        for j in range(nargs):
            t = argids[s * nargs + j]
            g = 2 + j * GW
            nd = M[t, M_NDIM]
            if (nd != G[g] or M[t, M_DTYPE] != G[g + 1] or (M[t, M_FLAGS] & mask) != G[g + 2]
                    or (M[t, M_ROW] < 0) != (G[g + 3] != 0)):
                return False
            for d in range(nd):
                if (M[t, M_SHAPE + d] != G[g + 4 + d]
                        or M[t, M_STRIDE + d] != G[g + 4 + MAXD + d]):
                    return False
            first = j
            for k in range(j):
                if argids[s * nargs + k] == t:
                    first = k
                    break
            if first != G[g + 4 + 2 * MAXD]:
                return False
    return True


@jit
def _room(C):
    if C[C_META_CAP] - C[C_LIVE_META] < 16:
        return E_GROW_META
    if C[C_STOR_CAP] - C[C_LIVE_STOR] < 16:
        return E_GROW_STOR
    return 0


@jit_entry
def run(caddr, haddr):
    """Run from the saved state to the end of the last step. Returns 0, or a status (the
    state then names the instruction to handle and resume at)."""
    C = ctx_of(caddr)
    H = i64_at(haddr, HW)
    S = i64_at(H[H_STATE], 4)
    P = i64_at(H[H_PROG], H[H_NPROG])
    PF = f64_at(H[H_PROG], H[H_NPROG])
    ids = i64_at(H[H_SLOTS], H[H_NSLOTS])
    nargs = H[H_NARGS]
    nret = H[H_NRET]
    argslots = i64_at(H[H_ARGSLOTS], nargs + 1)
    argids = i64_at(H[H_ARGIDS], H[H_STEPS] * nargs + 1)
    retslots = i64_at(H[H_RETSLOTS], nret + 1)
    retids = i64_at(H[H_RETIDS], H[H_STEPS] * nret + 1)
    retown = i64_at(H[H_RETOWN], nret + 1)
    seeds = i64_at(H[H_SEEDS], H[H_STEPS] * H[H_NSEEDS] + 1)
    nprog = H[H_NPROG]
    step = S[S_STEP]
    pc = S[S_PC]
    if step == 0 and pc == 0 and H[H_GUARD] != 0:
        G = i64_at(H[H_GUARD], 2 + nargs * GW)
        if not _args_match(C, G, argids, H[H_STEPS], nargs):
            return E_GUARD
    C[C_PLAN] = H[H_PLAN]
    C[C_PLANN] = H[H_PLANN]
    while step < H[H_STEPS]:
        if pc == 0:
            C[C_PLANK] = 0
            for j in range(nargs):
                ids[argslots[j]] = argids[step * nargs + j]
        while pc < nprog:
            code = P[pc]
            n = P[pc + 1]
            st = 0
            if code == I_OP:
                ia = iargs_of(C)
                ni = P[pc + 9]
                nouts = P[pc + 8]
                q = pc + 10 + nouts
                for j in range(ni):
                    ia[j] = P[q + j]
                c = P[pc + 5]
                if c >= 0:
                    ia[IA_IN2] = ids[c]
                b = P[pc + 4]
                r = call_native_op(H[H_OPFN], caddr, P[pc + 2], ids[P[pc + 3]],
                                   ids[b] if b >= 0 else -1, PF[pc + 6], P[pc + 7])
                if r == E_FALLBACK and pc + n < nprog and P[pc + n] == I_ALT:
                    n += P[pc + n + 1]          # on to the replaced instructions
                elif r < 0:
                    st = r
                elif not P[pc + 7] & OPF_INPLACE:
                    o = outs_of(C)
                    if C[C_NOUTS] != nouts:
                        st = -1000 - C[C_NOUTS]
                    else:
                        for j in range(nouts):
                            ids[P[pc + 10 + j]] = o[j]
            elif code == I_SWEEP:
                nr = P[pc + 2]
                ia = iargs_of(C)
                for j in range(nr):
                    ia[j] = ids[P[pc + 4 + j]]
                    sd = P[pc + 4 + nr + j]
                    ia[nr + j] = ids[sd] if sd >= 0 else -1
                st = call_native_sweep(H[H_SWEEPFN], caddr, nr, 0, MODE_BACKWARD,
                                       P[pc + 3] != 0)
            elif code == I_OPT:
                if table_stale(C, P[pc + 3], P[pc + 4], P[pc + 6], P[pc + 7]):
                    st = E_OPT_STALE
                else:
                    r = call_native_i4(P[pc + 2], caddr, P[pc + 3], P[pc + 4], P[pc + 5])
                    if r < 0:
                        S[S_DETAIL] = r
                        st = E_OPTIMIZER
            elif code == I_FREE:
                for j in range(pc + 2, pc + n):
                    s = P[j]
                    if ids[s] >= 0:
                        call_native_i2(H[H_RELEASE], caddr, ids[s])
                        ids[s] = -1
            elif code == I_ALIAS:
                st = _room(C)
                if st == 0:
                    fn = H[H_DETACH] if P[pc + 2] == 0 else H[H_DATA]
                    ids[P[pc + 4]] = call_native_i2(fn, caddr, ids[P[pc + 3]])
            elif code == I_GRAD:
                M = meta_of(C)
                g = M[ids[P[pc + 2]], M_GRAD]
                if g < 0:
                    st = E_NO_GRAD
                else:
                    M[g, M_REFS] += 1
                    ids[P[pc + 3]] = g
            elif code == I_GRADNONE:
                M = meta_of(C)
                t = ids[P[pc + 2]]
                g = M[t, M_GRAD]
                if g >= 0:
                    if P[pc + 3]:           # zero_grad(set_to_none=False)
                        nb = M[g, M_NUMEL] * (8 if M[g, M_DTYPE] == F64 else 4)
                        u8_at(data_addr(C, g), nb)[:] = 0
                        bump_version(C, g)
                    else:
                        M[t, M_GRAD] = -1
                        call_native_i2(H[H_RELEASE], caddr, g)
            elif code == I_RAND:
                st = _room(C)
                if st == 0:
                    nd = P[pc + 4]
                    ia = iargs_of(C)
                    for d in range(nd):
                        ia[d] = P[pc + 8 + d]
                    t = call_native_new(H[H_NEW], caddr, P[pc + 3], nd, False)
                    if t < 0:
                        st = E_NOMEM
                    else:
                        M = meta_of(C)
                        call_native_fill(H[H_FILL], data_addr(C, t), M[t, M_NUMEL],
                                         M[t, M_DTYPE] == F64,
                                         seeds[step * H[H_NSEEDS] + P[pc + 7]], PF[pc + 5],
                                         PF[pc + 6])
                        ids[P[pc + 2]] = t
            elif code == I_ALT:
                n += P[pc + 2]
            elif code == I_HOST:
                st = E_HOST
            elif code == I_IADD:
                t = ids[P[pc + 2]]
                M = meta_of(C)
                A = i64_at(data_addr(C, t), M[t, M_NUMEL])
                A += P[pc + 3]
                bump_version(C, t)
            if st != 0:
                S[S_STEP] = step
                S[S_PC] = pc
                return st
            pc += n
        for j in range(nret):
            retids[step * nret + j] = ids[retslots[j]]
        for j in range(nret):
            if retown[j]:
                ids[retslots[j]] = -1
        pc = 0
        step += 1
    S[S_STEP] = 0
    S[S_PC] = 0
    C[C_PLANN] = 0
    C[C_PLANK] = 0
    return 0


RUN_SIG = "int64(int64, int64)"
