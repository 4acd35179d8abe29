"""Op entry: one call records an op on the tape (checks, outputs, saved inputs and their
versions, the row) and runs its forward kernel, or refuses with a status Python turns
into PyTorch's error. In-place ops on views write through and regenerate the views'
history. Per-op kernels are called through the FWD/BWD tables of function addresses, so
this module never grows with the number of ops."""
from .layout import *  # noqa: F401,F403  (column names are the vocabulary of this file)
from .lowlevel import (jit, jit_entry, jit_native, ctx_of, meta_of, stor_of, tape_of, fattr_of,
                       iargs_of, outs_of, err_of, opinfo_of, fwd_table, f64_at, call_kernel,
                       call_native_i2, call_native_i4)
from .memory import (KIND_META, KIND_ROW, KIND_STOR, decref, drain, rec_at, rec_log, row_discard,
                     row_new)
from .views import (regen_views, views_ready, bump_version, is_multi_view, is_stale_view,
                    meta_alias, requires_grad_through_base, version_of)
from .elementwise import call_ew, ew_forward_prep, span


@jit
def _ranges_overlap(C, a, b):
    M = meta_of(C)
    if M[a, M_SID] != M[b, M_SID] or M[a, M_NUMEL] == 0 or M[b, M_NUMEL] == 0:
        return False
    same = M[a, M_OFF] == M[b, M_OFF] and M[a, M_NDIM] == M[b, M_NDIM]
    for d in range(M[a, M_NDIM]):
        same = (same and M[a, M_SHAPE + d] == M[b, M_SHAPE + d]
                and M[a, M_STRIDE + d] == M[b, M_STRIDE + d])
    if same:
        return False            # x.add_(x): each element reads only itself
    a0 = M[a, M_OFF]
    b0 = M[b, M_OFF]
    return a0 < b0 + span(M, b) and b0 < a0 + span(M, a)


@jit
def _inplace_check(C, op, a, b, grad_on, record):
    """PyTorch's refusals for an in-place write into a."""
    M = meta_of(C)
    if grad_on:
        if M[a, M_FLAGS] & FL_NOGRADVIEW and (record or M[M[a, M_BASE], M_FLAGS] & FL_REQ):
            return E_NOGRAD_VIEW_INPLACE
        if M[a, M_FLAGS] & FL_REQ and M[a, M_ROW] < 0:
            return E_LEAF_INPLACE
        if M[a, M_FLAGS] & (FL_VIEW | FL_PLAINVIEW) and record:
            return E_VIEW_INPLACE
    for d in range(M[a, M_NDIM]):
        # (an empty tensor has no elements to share memory, whatever its strides)
        if (M[a, M_STRIDE + d] == 0 and M[a, M_SHAPE + d] > 1 and M[a, M_NUMEL] > 0
                and not opinfo_of(C)[op, O_FLAGS] & OF_OVERLAP_OK):
            return E_SELF_OVERLAP
    if b >= 0 and _ranges_overlap(C, a, b):
        return E_OVERLAP
    return 0


@jit
def _log_op(C, op, ids, s, flags):
    nouts = C[C_NOUTS]
    n = 9 + nouts + EV_NIARG
    p = rec_at(C, n)
    if p < 0:
        return
    R = rec_log(C)
    R[p] = EV_OP
    R[p + 1] = n
    R[p + 2] = op
    for k in range(MAXIN):
        R[p + 3 + k] = ids[k]
    f64_at(C[C_REC] + (p + 6) * 8, 1)[0] = s
    R[p + 7] = flags
    R[p + 8] = nouts
    o = outs_of(C)
    for j in range(nouts):
        R[p + 9 + j] = o[j]
    ia = iargs_of(C)
    for j in range(EV_NIARG):
        R[p + 9 + nouts + j] = ia[j]


@jit_entry
def op_entry(caddr, op, a, b, s, flags):
    """Run op on tensors a, b (b < 0: absent or the Python scalar s); int arguments were
    written to iargs. Records a row when gradients are wanted. Returns the first output
    id (further outputs in outs[]) or a negative status; nothing changes on failure.
    With OPF_SOLO the outputs go to outs_solo[] instead (see layout.OPF_SOLO)."""
    C = ctx_of(caddr)
    solo = (flags & OPF_SOLO) != 0
    outs, nouts = C[C_OUTS], C[C_NOUTS]
    if solo:
        C[C_OUTS] = C[C_OUTS_SOLO]
    r = _op(caddr, op, a, b, s, flags & ~OPF_SOLO)     # (one call site: inlined once)
    if solo:
        C[C_OUTS] = outs
        C[C_NOUTS] = nouts
    return r


@jit
def _op(caddr, op, a, b, s, flags):
    """op_entry's work, with outs[] wherever C_OUTS points."""
    C = ctx_of(caddr)
    drain(C)
    M = meta_of(C)
    T = tape_of(C)
    if C[C_META_CAP] - C[C_LIVE_META] < 16 + C[C_OUTS_CAP]:
        return E_GROW_META
    if C[C_STOR_CAP] - C[C_LIVE_STOR] < 16 + C[C_OUTS_CAP]:
        return E_GROW_STOR
    if C[C_TAPE_CAP] - C[C_LIVE_ROWS] < 4:
        return E_GROW_TAPE
    want = C[C_WANT_ROWS]
    if want != 0:           # row-broadcast loops an earlier op wanted (call_ew): load them
        # (Python clears the mark when it loads them: a caller may drop this status and
        # call again)
        err_of(C)[0] = (want - 1) // NKSLOT
        err_of(C)[1] = (want - 1) % NKSLOT
        return E_NEED_KERNEL
    info = opinfo_of(C)
    ew = info[op, O_KIND] == KIND_EW
    dta = M[a, M_DTYPE]
    if ew and (dta != F32 and dta != F64):
        return E_DTYPE
    slot = op * NKSLOT + (1 if dta == F64 else 0)
    fwd = fwd_table(C)[slot]
    if fwd == 0:
        err_of(C)[0] = op
        err_of(C)[1] = slot - op * NKSLOT
        return E_NEED_KERNEL
    if info[op, O_TANGENT] > 0 and C[C_TANGENT] == 0:
        err_of(C)[0] = op
        err_of(C)[1] = KSLOT_TANGENT
        return E_NEED_KERNEL
    diff = info[op, O_DIFF]
    grad_on = (flags & 1) != 0
    inplace = (flags & 2) != 0

    ids = (a, b, iargs_of(C)[IA_IN2] if flags & OPF_IN2 else -1)     # (MAXIN of them)
    record = False
    need = 0          # what the gradients of the inputs that require grad will read
    if grad_on:
        for k in range(MAXIN):
            if ids[k] < 0 or not (diff >> k) & 1:
                continue
            if M[ids[k], M_FLAGS] & (FL_REQ | FL_STALE):
                if M[ids[k], M_FLAGS] & FL_STALE:
                    if is_stale_view(M, ids[k]) and not (inplace and k == 0):
                        err_of(C)[0] = ids[k]
                        return E_STALE_VIEW
                    if not M[ids[k], M_FLAGS] & FL_REQ:
                        continue
                record = True
                need |= info[op, O_SAVES_IF + k]
            elif requires_grad_through_base(M, ids[k]):
                record = True       # (with no edge to it: nothing to save for it)
    if inplace:
        if C[C_INPLACE_FN] == 0 or (record and need & 1 and C[C_CLONE] == 0):
            err_of(C)[0] = op
            err_of(C)[1] = KSLOT_INPLACE if C[C_INPLACE_FN] == 0 else KSLOT_CLONE
            return E_NEED_KERNEL
        st = call_native_i4(C[C_INPLACE_FN], caddr, a, b,
                            IP_CHECK | (IP_GRAD if grad_on else 0)
                            | (IP_RECORD if record else 0) | (op << IP_OP_SHIFT))
        if st < 0:
            return st
    r = row_new(C)
    if need:            # the versions of what will be saved, before any in-place write
        for k in range(MAXIN):
            if ids[k] >= 0 and (need >> k) & 1:
                T[r, R_IN + k * IW + IN_VER] = version_of(C, ids[k])
    T[r, R_OP] = op
    ia = iargs_of(C)
    for j in range(NIATTR):
        T[r, R_IATTR + j] = ia[j]
    fattr_of(C)[r] = s
    nin = 0
    for k in range(MAXIN):
        T[r, R_IN + k * IW + IN_ID] = ids[k]
        if ids[k] >= 0:
            nin = k + 1
    T[r, R_NIN] = nin

    self_copy = -1
    if inplace and record and need & 1:
        self_copy = call_native_i2(C[C_CLONE], caddr, a)   # the gradient needs self as it was
        if self_copy < 0:
            row_discard(C, r)
            return self_copy
        M[self_copy, M_REFS] += 1
        T[r, R_IN + IN_VER] = version_of(C, self_copy)
    C[C_INPLACE] = a if inplace else -1
    C[C_NOUTS] = 0
    if ew:
        st = ew_forward_prep(C, r, a, b)
        if st >= 0:
            outs_of(C)[0] = st
            C[C_NOUTS] = 1
            if info[op, O_TANGENT] > 0:
                st = call_native_i4(C[C_TANGENT], caddr, r, (1 if record else 0) | (diff << 1),
                                    info[op, O_TANGENT])
            if st >= 0:
                st = call_ew(C, fwd, fwd_table(C), slot + KSLOT_ROWS, False)
    else:
        st = call_kernel(fwd, caddr, r)
    C[C_INPLACE] = -1
    if st != K_OK:
        if st >= 0:
            err_of(C)[0] = op
            st = E_KERNEL
        if self_copy >= 0:
            decref(C, KIND_META, self_copy)
        if T[r, R_TAN] >= 0:
            decref(C, KIND_STOR, T[r, R_TAN])
        row_discard(C, r)
        return st
    outs = outs_of(C)
    nouts = C[C_NOUTS]
    if inplace:
        bump_version(C, a)
    else:
        for j in range(nouts):
            M[outs[j], M_REFS] += 1         # the Python wrapper about to be made
    if C[C_REC] != 0:
        _log_op(C, op, ids, s, flags)
    if not record:
        if not inplace:
            for j in range(nouts):      # a view made in grad mode of a tensor without a
                o = outs[j]             # history gets one if its base does; one made
                fl = M[o, M_FLAGS]      # under no_grad, or of such a view, is marked
                if fl & FL_HVIEW or not fl & (FL_PLAINVIEW | FL_VIEW):
                    continue
                if not grad_on or M[a, M_FLAGS] & FL_NOGRADVIEW:
                    M[o, M_FLAGS] |= FL_HVIEW | FL_NOGRADVIEW
                    stor_of(C)[M[o, M_SID], S_HVIEWS] += 1
                    if grad_on:                 # (named in PyTorch's message)
                        M[o, M_SRCOP] = op
                elif fl & FL_PLAINVIEW:
                    M[o, M_FLAGS] |= FL_HVIEW
                    stor_of(C)[M[o, M_SID], S_HVIEWS] += 1
        row_discard(C, r)
        return outs[0]

    for k in range(nin):
        t = ids[k]
        if t < 0:
            continue
        base = R_IN + k * IW
        if (diff >> k) & 1 and M[t, M_FLAGS] & FL_REQ:
            pr = M[t, M_ROW]
            if pr >= 0:
                T[r, base + IN_ROW] = pr
                T[r, base + IN_OIDX] = M[t, M_OIDX]
                T[pr, R_REFS] += 1
            else:
                T[r, base + IN_T] = t
                M[t, M_REFS] += 1
        if (need >> k) & 1:
            src = self_copy if (k == 0 and self_copy >= 0) else t
            al = meta_alias(C, src)
            M[al, M_REFS] = 1
            if src == self_copy:
                M[al, M_SRCOP] = M[a, M_SRCOP]
            T[r, base + IN_SAVED] = al
    if self_copy >= 0:
        decref(C, KIND_META, self_copy)
    if b < 0 and need & 2:
        T[r, R_STATE] |= RS_SCALAR

    ngrad = 0
    for j in range(nouts):
        o = outs[j]
        dto = M[o, M_DTYPE]
        if dto != F32 and dto != F64:
            continue
        if inplace:
            old = M[o, M_ROW]
            M[o, M_ROW] = r
            M[o, M_OIDX] = j
            T[r, R_REFS] += 1
            if old >= 0:
                decref(C, KIND_ROW, old)
        else:
            M[o, M_ROW] = r
            M[o, M_OIDX] = j
            T[r, R_REFS] += 1
            fl = M[o, M_FLAGS]
            nograd = ((fl & (FL_VIEW | FL_PLAINVIEW)) != 0
                      and (M[a, M_FLAGS] & FL_NOGRADVIEW) != 0)
            if nograd:          # a view, made in grad mode, of a view made under no_grad
                M[o, M_FLAGS] |= FL_NOGRADVIEW
                M[o, M_SRCOP] = op                  # (named in PyTorch's message)
            if not fl & FL_HVIEW and ((fl & FL_VIEW) != 0 or nograd):
                M[o, M_FLAGS] |= FL_HVIEW
                stor_of(C)[M[o, M_SID], S_HVIEWS] += 1
            if fl & FL_VIEW and is_multi_view(C, a):    # (PyTorch passes the rule on)
                M[o, M_FLAGS] |= FL_MULTIVIEW
        M[o, M_FLAGS] |= FL_REQ
        ngrad += 1
    o0 = outs[0]
    T[r, R_NOUT] = ngrad
    T[r, R_ODTYPE] = M[o0, M_DTYPE]
    T[r, R_ONDIM] = M[o0, M_NDIM]
    for d in range(MAXD):
        T[r, R_OSHAPE + d] = M[o0, M_SHAPE + d]
    if need & SAVE_OUT:
        al = meta_alias(C, outs[info[op, O_SAVED_OUT]])
        M[al, M_REFS] = 1
        T[r, R_OSAVED] = al
        T[r, R_OVER] = version_of(C, al)
    if inplace and stor_of(C)[M[a, M_SID], S_HVIEWS] > 0:
        call_native_i4(C[C_INPLACE_FN], caddr, a, r, 0)
    return outs[0]


@jit_native
def inplace_entry(caddr, a, x, what):
    """op_entry's in-place path, which it calls through C_INPLACE_FN: compiled into it,
    these lines cost a second of every cold start, for programs that may never write in
    place with the engine (the demo does not). what & IP_CHECK: before anything changes,
    PyTorch's refusals for a write into a (x: the other operand, -1 for none) and, when
    the op records (IP_RECORD), what re-deriving a's views will need. Else after the op
    recorded row x: re-derive the views' histories (regen_views)."""
    C = ctx_of(caddr)
    if not what & IP_CHECK:
        regen_views(C, a, x)
        return 0
    record = (what & IP_RECORD) != 0
    st = _inplace_check(C, what >> IP_OP_SHIFT, a, x, (what & IP_GRAD) != 0, record)
    if st < 0 or not record:
        return st
    return views_ready(C, a)
