"""The reverse sweep: one compiled loop over the tape from the roots, delivering each
row's output gradient to its backward kernel and its inputs' edges, with version checks
of the saved inputs, hooks and autograd.Function rows handed back to Python
(E_CALLBACK), and the pruning autograd.grad's captures allow."""
from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .lowlevel import (jit, jit_entry, jit_native, ctx_of, meta_of, stor_of, tape_of, iargs_of,
                       outs_of, err_of, opinfo_of, bwd_table, i64_at, f32_at, f64_at, call_kernel,
                       call_native_i2)
from .memory import (KIND_META, KIND_STOR, refused_sweep, bytes_of, data_addr, decref, drain,
                     itemsize, meta_new, rec_at, rec_log, set_contiguous_strides)
from .views import version_of
from .loops import add_into, add_one
from .grads import edge_grad_addr, grad_attr_addr, leaf_grad_addr, out_numel, row_grad_addr
from .elementwise import call_ew, ew_backward_prep

# anomaly mode (autograd.detect_anomaly): the sweep state's SW_ANOMALY word, read once per
# sweep; a row whose backward wrote NaN into an input's gradient stops the sweep with
# E_ANOMALY, err = (row, input index)


@jit
def _edge_buffer(C, r, k):
    """(address, numel, dtype) of the gradient buffer input k of row r accumulates into,
    if it exists yet (address 0 otherwise): nothing is made, nothing is bumped."""
    T = tape_of(C)
    M = meta_of(C)
    base = R_IN + k * IW
    pr = T[r, base + IN_ROW]
    if pr >= 0:
        sid = T[pr, R_GBUF]
        if not T[pr, R_STATE] & RS_MARK or sid < 0:
            return 0, 0, F32
        n = out_numel(T, pr)
        dt = T[pr, R_ODTYPE]
        return stor_of(C)[sid, S_ADDR] + T[r, base + IN_OIDX] * n * itemsize(dt), n, dt
    t = T[r, base + IN_T]
    if t < 0:
        return 0, 0, F32
    if C[C_MODE] == MODE_GRAD or M[t, M_FLAGS] & FL_HOOK:
        sid = M[t, M_GTMP]
        if sid < 0:
            return 0, 0, F32
        return stor_of(C)[sid, S_ADDR], M[t, M_NUMEL], M[t, M_DTYPE]
    if M[t, M_GRAD] < 0:
        return 0, 0, F32
    return data_addr(C, M[t, M_GRAD]), M[t, M_NUMEL], M[t, M_DTYPE]


@jit
def _edge_has_nan(C, r, k):
    a, n, dt = _edge_buffer(C, r, k)
    if a == 0 or (dt != F32 and dt != F64):
        return False
    if dt == F32:
        x = f32_at(a, n)
        for i in range(n):
            if x[i] != x[i]:
                return True
    else:
        y = f64_at(a, n)
        for i in range(n):
            if y[i] != y[i]:
                return True
    return False


@jit
def _nan_edges(C, r):
    """Bits of row r's inputs whose gradient buffer holds NaN already (before its
    backward runs: a NaN another row put there is not this row's)."""
    T = tape_of(C)
    bits = 0
    for k in range(T[r, R_NIN]):
        if _edge_has_nan(C, r, k):
            bits |= 1 << k
    return bits


@jit
def _first_new_nan(C, r, before):
    """The first input of row r whose gradient gained NaN in its backward, or -1."""
    T = tape_of(C)
    for k in range(T[r, R_NIN]):
        if not (before >> k) & 1 and _edge_has_nan(C, r, k):
            return k
    return -1


@jit
def _deliver(C, m, r):
    """Copy row r's finished output gradient into tensor m's retained/captured slot."""
    M = meta_of(C)
    T = tape_of(C)
    n = out_numel(T, r)
    src = row_grad_addr(C, r, M[m, M_OIDX])
    if C[C_MODE] == MODE_GRAD and M[m, M_FLAGS] & FL_CAPTURE:
        dst = leaf_grad_addr(C, m)
        if dst != 0:
            add_into(T[r, R_ODTYPE], dst, src, n)
    if M[m, M_FLAGS] & FL_RETAIN:      # (autograd.grad fills retained grads too, as PyTorch)
        dst = grad_attr_addr(C, m)
        if dst != 0:
            add_into(T[r, R_ODTYPE], dst, src, n)


@jit
def _unmark(T, rows, n):
    for j in range(n):
        r = rows[j]
        T[r, R_STATE] &= ~(RS_MARK | RS_NORUN)
        T[r, R_DEPS] = 0


@jit
def _push_ready_inputs(T, r, stack, ns):
    """Row r is done: each input row it was the last waiting consumer of goes on the
    stack. Returns the new stack size. (An input autograd.grad pruned waits on nothing:
    its count stays 0 for later sweeps.)"""
    for k in range(T[r, R_NIN]):
        pr = T[r, R_IN + k * IW + IN_ROW]
        if pr >= 0 and T[pr, R_STATE] & RS_MARK:
            T[pr, R_DEPS] -= 1
            if T[pr, R_DEPS] == 0:
                stack[ns] = pr
                ns += 1
    return ns


@jit_native
def prune_entry(caddr, nm):
    """_prune_to_captures over the sweep's marked rows, for sweep, which calls it through
    C_PRUNE_FN: compiled into it, these lines cost a cold start's backward() for what
    only autograd.grad needs."""
    C = ctx_of(caddr)
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    return _prune_to_captures(C, B[3 * cap:4 * cap], B[0:cap], nm)


@jit
def _prune_to_captures(C, rows, stack, nm):
    """autograd.grad: keep only the marked rows on a path to a captured tensor, as
    PyTorch's engine does, so an unrelated branch is neither run (its hooks, its version
    checks, its release) nor charged. A kept row is needed (an input leads to a capture)
    or only captured at (RS_NORUN). Orders the rows consumers-first with R_DEPS (Kahn),
    decides them producers-first, and returns the kept count, compacted in rows."""
    T = tape_of(C)
    M = meta_of(C)
    ns = 0
    for j in range(nm):
        if T[rows[j], R_DEPS] == 0:
            stack[ns] = rows[j]
            ns += 1
    n = 0
    while ns > 0:
        ns -= 1
        r = stack[ns]
        rows[n] = r
        n += 1
        ns = _push_ready_inputs(T, r, stack, ns)
    for j in range(nm):
        r = rows[j]
        for k in range(T[r, R_NIN]):
            pr = T[r, R_IN + k * IW + IN_ROW]
            if pr >= 0:
                T[pr, R_DEPS] += 1
    for j in range(nm - 1, -1, -1):
        r = rows[j]
        needed = False
        for k in range(T[r, R_NIN]):
            pr = T[r, R_IN + k * IW + IN_ROW]
            t = T[r, R_IN + k * IW + IN_T]
            if pr >= 0:
                needed = needed or (T[pr, R_STATE] & RS_MARK) != 0
            elif t >= 0:
                needed = needed or (M[t, M_FLAGS] & FL_CAPTURE) != 0
        if needed:
            T[r, R_STATE] &= ~RS_NORUN
        elif not T[r, R_STATE] & RS_NORUN:
            T[r, R_STATE] &= ~RS_MARK
            T[r, R_DEPS] = 0
    kept = 0
    for j in range(nm):
        r = rows[j]
        if T[r, R_STATE] & RS_MARK:
            rows[kept] = r
            kept += 1
    return kept


@jit_entry
def sweep(caddr, nroots, ncap, mode, retain):
    """backward()/autograd.grad(): iargs holds root ids [0:nroots], their seed ids
    (-1: ones) [nroots:2*nroots] and captured ids [2*nroots:2*nroots+ncap]. Marks the
    rows reachable from the roots, checks versions and freed buffers before touching
    anything, then runs the rows in dependency order (each after all its consumers)."""
    C = ctx_of(caddr)
    if mode == MODE_GRAD and C[C_PRUNE_FN] == 0:
        err_of(C)[1] = KSLOT_PRUNE
        return E_NEED_KERNEL
    drain(C)
    M = meta_of(C)
    T = tape_of(C)
    I = iargs_of(C)
    E = err_of(C)
    bwd = bwd_table(C)
    C[C_MODE] = mode
    C[C_SW_REFUSED] = C[C_NOMEM_COUNT]
    info = opinfo_of(C)
    # the marked rows and the marking stack live in the regions of the pausable state
    # that hold them later (Python sizes them past the live rows): nothing to allocate
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    rows = B[3 * cap:4 * cap]
    stack = B[0:cap]
    nm = 0
    ns = 0
    for i in range(nroots):
        r = M[I[i], M_ROW]
        if r >= 0 and not T[r, R_STATE] & RS_MARK:
            T[r, R_STATE] |= RS_MARK
            rows[nm] = r
            nm += 1
            stack[ns] = r
            ns += 1
    while ns > 0:
        ns -= 1
        r = stack[ns]
        for k in range(T[r, R_NIN]):
            pr = T[r, R_IN + k * IW + IN_ROW]
            if pr >= 0:
                T[pr, R_DEPS] += 1
                if not T[pr, R_STATE] & RS_MARK:
                    T[pr, R_STATE] |= RS_MARK
                    rows[nm] = pr
                    nm += 1
                    stack[ns] = pr
                    ns += 1
    if mode == MODE_GRAD:
        for i in range(ncap):
            r = M[I[2 * nroots + i], M_ROW]
            if r >= 0 and T[r, R_STATE] & RS_MARK:
                T[r, R_STATE] |= RS_NORUN       # captured at (until found needed)
        nm = call_native_i2(C[C_PRUNE_FN], caddr, nm)
    # every check before any gradient is written: room for a gradient buffer per row and
    # per leaf edge, kernels present, saved tensors intact
    need = nroots + ncap + 8
    for j in range(nm):
        r = rows[j]
        need += 1
        for k in range(T[r, R_NIN]):
            if T[r, R_IN + k * IW + IN_T] >= 0:
                need += 1
    if C[C_STOR_CAP] - C[C_LIVE_STOR] < need:
        _unmark(T, rows, nm)
        return E_GROW_STOR
    if C[C_META_CAP] - C[C_LIVE_META] < need:
        _unmark(T, rows, nm)
        return E_GROW_META
    for j in range(nm):
        r = rows[j]
        op = T[r, R_OP]
        if T[r, R_STATE] & RS_NORUN:
            continue
        if T[r, R_STATE] & RS_RELEASED:
            _unmark(T, rows, nm)
            E[0] = r
            return E_FREED
        # gradient buffers no allocation can hold (a huge expanded view's): refused now,
        # before a row runs and frees what it saved
        nb = bytes_of(out_numel(T, r), T[r, R_NOUT], itemsize(T[r, R_ODTYPE]))
        for k in range(T[r, R_NIN]):
            t = T[r, R_IN + k * IW + IN_T]
            if t >= 0 and nb >= 0 and nb <= C[C_MAX_BYTES]:
                nb = bytes_of(M[t, M_NUMEL], 1, itemsize(M[t, M_DTYPE]))
        if nb < 0 or nb > C[C_MAX_BYTES]:
            _unmark(T, rows, nm)
            E[0] = r
            return refused_sweep(C, nb)
        slot = op * NKSLOT + (1 if T[r, R_ODTYPE] == F64 else 0)
        if bwd[slot] == 0 and info[op, O_KIND] != KIND_PY:
            _unmark(T, rows, nm)
            E[0] = op
            E[1] = slot - op * NKSLOT
            return E_NEED_KERNEL
        for k in range(-1, T[r, R_NIN]):
            if k < 0:
                sv = T[r, R_OSAVED]
                ver = T[r, R_OVER]
            else:
                sv = T[r, R_IN + k * IW + IN_SAVED]
                ver = T[r, R_IN + k * IW + IN_VER]
            if sv >= 0 and version_of(C, sv) != ver:
                _unmark(T, rows, nm)
                E[0] = r
                E[1] = sv
                E[2] = version_of(C, sv)
                E[3] = ver
                E[4] = k
                return E_VERSION
    if C[C_REC] != 0:
        n = 6 + 2 * nroots
        p = rec_at(C, n)
        if p >= 0:
            R = rec_log(C)
            R[p] = EV_SWEEP
            R[p + 1] = n
            R[p + 2] = nroots
            R[p + 3] = ncap
            R[p + 4] = mode
            R[p + 5] = retain
            for i in range(2 * nroots):
                R[p + 6 + i] = I[i]
    # the state that must survive a pause for Python lives in buffers Python sized
    W_ = i64_at(C[C_SW_STATE], SWW)
    deliver = B[cap:2 * cap]
    nd_ = 0
    for i in range(ncap):
        m = I[2 * nroots + i]
        B[2 * cap + i] = m
        r = M[m, M_ROW]
        if r >= 0 and T[r, R_STATE] & RS_MARK:
            deliver[nd_] = m
            nd_ += 1
    if C[C_NRETAIN] > 0:
        for m in range(C[C_META_CAP]):
            if (M[m, M_REFS] > 0 and M[m, M_FLAGS] & FL_RETAIN
                    and not (mode == MODE_GRAD and M[m, M_FLAGS] & FL_CAPTURE)):
                r = M[m, M_ROW]
                if r >= 0 and T[r, R_STATE] & RS_MARK:
                    deliver[nd_] = m
                    nd_ += 1
    # seeds
    for i in range(nroots):
        t = I[i]
        seed = I[nroots + i]
        r = M[t, M_ROW]
        if r >= 0:
            if not T[r, R_STATE] & RS_MARK:     # (pruned by autograd.grad)
                continue
            dst = row_grad_addr(C, r, M[t, M_OIDX])
        else:
            dst = leaf_grad_addr(C, t)
        if dst == 0:
            continue
        if seed < 0:
            add_one(M[t, M_DTYPE], dst, M[t, M_NUMEL])
        else:
            add_into(M[t, M_DTYPE], dst, data_addr(C, seed), M[t, M_NUMEL])
    ns = 0
    for j in range(nm):
        r = rows[j]
        if T[r, R_DEPS] == 0:
            B[ns] = r
            ns += 1
    W_[SW_NS] = ns
    W_[SW_ND] = nd_
    W_[SW_NCAP] = ncap
    W_[SW_NM] = nm
    W_[SW_RETAIN] = retain
    W_[SW_STATUS] = 0
    W_[SW_PENDING] = -1
    W_[SW_ACTIVE] = 1
    return _sweep_loop(caddr)


@jit
def _sweep_loop(caddr):
    """Run the marked rows in dependency order. A row whose backward is Python's (an
    autograd.Function) or whose outputs have hooks makes the loop save its state and
    return E_CALLBACK; Python does its part and calls sweep_resume, which finishes that
    row and goes on."""
    C = ctx_of(caddr)
    M = meta_of(C)
    T = tape_of(C)
    E = err_of(C)
    bwd = bwd_table(C)
    info = opinfo_of(C)
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    W_ = i64_at(C[C_SW_STATE], SWW)
    stack = B[0:cap]
    deliver = B[cap:2 * cap]
    ns = W_[SW_NS]
    nd_ = W_[SW_ND]
    status = W_[SW_STATUS]
    retain = W_[SW_RETAIN] != 0
    pending = W_[SW_PENDING]
    W_[SW_PENDING] = -1
    anomaly = W_[SW_ANOMALY] != 0
    while ns > 0 or pending >= 0:
        if pending >= 0:
            r = pending
            pending = -1
            resumed = True
        else:
            ns -= 1
            r = stack[ns]
            resumed = False
        norun = (T[r, R_STATE] & RS_NORUN) != 0
        if T[r, R_GBUF] >= 0 and status == 0:
            op = T[r, R_OP]
            py = info[op, O_KIND] == KIND_PY
            if ((py and not norun) or T[r, R_STATE] & RS_HOOK) and not resumed:
                W_[SW_NS] = ns
                W_[SW_ND] = nd_
                W_[SW_STATUS] = status
                W_[SW_PENDING] = r
                E[0] = r
                E[1] = ((CB_FUNCTION if py and not norun else 0)
                        | (CB_HOOKS if T[r, R_STATE] & RS_HOOK else 0))
                return E_CALLBACK
            for q in range(nd_):
                if M[deliver[q], M_ROW] == r:
                    _deliver(C, deliver[q], r)
            if not py and not norun:    # (a Function's backward already ran, in Python)
                slot = op * NKSLOT + (1 if T[r, R_ODTYPE] == F64 else 0)
                fn = bwd[slot]
                before = _nan_edges(C, r) if anomaly else 0
                if info[op, O_KIND] == KIND_EW:
                    ew_backward_prep(C, r)
                    st = call_ew(C, fn, bwd, slot + KSLOT_ROWS, True)
                else:
                    st = call_kernel(fn, caddr, r)
                if st != K_OK:
                    status = st if st < 0 else E_KERNEL
                    E[0] = r
                elif anomaly:
                    k = _first_new_nan(C, r, before)
                    if k >= 0:
                        status = E_ANOMALY
                        E[0] = r
                        E[1] = k
        if status == 0 and C[C_NOMEM_COUNT] != C[C_SW_REFUSED]:
            status = E_NOMEM        # (a gradient buffer of this row or a seed was refused)
            E[0] = r
        T[r, R_STATE] &= ~(RS_MARK | RS_NORUN)
        if T[r, R_GBUF] >= 0:
            sid = T[r, R_GBUF]
            T[r, R_GBUF] = -1
            decref(C, KIND_STOR, sid)
        if norun:           # (its inputs were pruned: nothing waits on it)
            continue
        ns = _push_ready_inputs(T, r, stack, ns)
        if not retain:
            had = (T[r, R_STATE] & RS_SCALAR) != 0
            for k in range(T[r, R_NIN]):
                sv = T[r, R_IN + k * IW + IN_SAVED]
                if sv >= 0:
                    T[r, R_IN + k * IW + IN_SAVED] = -1
                    decref(C, KIND_META, sv)
                    had = True
            if T[r, R_OSAVED] >= 0:
                sv = T[r, R_OSAVED]
                T[r, R_OSAVED] = -1
                decref(C, KIND_META, sv)
                had = True
            if T[r, R_TAN] >= 0:
                sid = T[r, R_TAN]
                T[r, R_TAN] = -1
                decref(C, KIND_STOR, sid)
                had = True
            if had:
                T[r, R_STATE] |= RS_RELEASED
    W_[SW_ACTIVE] = 0
    if status == 0 and C[C_NOMEM_COUNT] != C[C_SW_REFUSED]:
        status = E_NOMEM
    if status < 0:
        return status
    # captured gradients become tensors the caller wraps
    outs = outs_of(C)
    for i in range(W_[SW_NCAP]):
        m = B[2 * cap + i]
        outs[i] = take_gtmp(C, m)
    return 0


@jit
def take_gtmp(C, m):
    """The gradient gathered in tensor m's M_GTMP buffer as a new tensor (refcount 1 for
    its wrapper), or -1."""
    M = meta_of(C)
    S = stor_of(C)
    sid = M[m, M_GTMP]
    if sid < 0:
        return -1
    g = meta_new(C, sid, 0, M[m, M_NDIM], M[m, M_DTYPE])
    S[sid, S_REFS] -= 1        # ownership moves from the slot to g
    M[m, M_GTMP] = -1
    for d in range(M[m, M_NDIM]):
        M[g, M_SHAPE + d] = M[m, M_SHAPE + d]
    set_contiguous_strides(M, g)
    M[g, M_REFS] = 1
    return g


@jit_entry
def sweep_resume(caddr):
    """Go on with a sweep paused by E_CALLBACK (Python has done the row's part)."""
    C = ctx_of(caddr)
    C[C_SW_REFUSED] = C[C_NOMEM_COUNT]      # (the callback's own ops raised for theirs)
    return _sweep_loop(caddr)


@jit_entry
def sweep_abort(caddr):
    """A Python callback failed: unmark every row of the paused sweep and free its
    gradient buffers, so later sweeps start clean."""
    C = ctx_of(caddr)
    T = tape_of(C)
    cap = C[C_SW_CAP]
    B = i64_at(C[C_SW_BUF], 4 * cap)
    W_ = i64_at(C[C_SW_STATE], SWW)
    if W_[SW_ACTIVE] == 0:
        return 0
    for j in range(W_[SW_NM]):
        r = B[3 * cap + j]
        T[r, R_STATE] &= ~(RS_MARK | RS_NORUN)
        T[r, R_DEPS] = 0
        if T[r, R_GBUF] >= 0:
            sid = T[r, R_GBUF]
            T[r, R_GBUF] = -1
            decref(C, KIND_STOR, sid)
    W_[SW_ACTIVE] = 0
    W_[SW_PENDING] = -1
    return 0


@jit_entry
def grad_of_row(caddr, r, k):
    """A tensor over the gradient of output k of row r (in the paused sweep), sharing its
    buffer: what hooks and a Function's backward receive. -1 if there is none."""
    C = ctx_of(caddr)
    T = tape_of(C)
    M = meta_of(C)
    sid = T[r, R_GBUF]
    if sid < 0:
        return -1
    nd = T[r, R_ONDIM]
    g = meta_new(C, sid, k * out_numel(T, r), nd, T[r, R_ODTYPE])
    if g < 0:
        return g
    for d in range(nd):
        M[g, M_SHAPE + d] = T[r, R_OSHAPE + d]
    set_contiguous_strides(M, g)
    M[g, M_REFS] = 1            # (meta_new took the storage reference)
    return g


@jit_entry
def add_to_edge(caddr, r, k, g):
    """Accumulate tensor g (contiguous, the input's shape and dtype: Python checked) into
    the gradient of input k of row r; 0, or 1 when that input wants no gradient."""
    C = ctx_of(caddr)
    M = meta_of(C)
    ga = edge_grad_addr(C, r, k)
    if ga == 0:
        return 1
    add_into(M[g, M_DTYPE], ga, data_addr(C, g), M[g, M_NUMEL])
    return 0


@jit_entry
def take_leaf_hook_grad(caddr, t):
    return take_gtmp(ctx_of(caddr), t)
