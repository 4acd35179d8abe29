"""Column numbers of the flat tables and the status codes kernels return.

Plain module-level ints: Numba freezes them as compile-time constants, Python reads
the same names, so the layout is defined in exactly one place.
"""

MAXD = 8          # max tensor rank
MAXIN = 3         # max tensor inputs of one tape row
NIATTR = 12       # int attributes per row (dims, shapes, flags of the op)

# dtype codes (index into tapegrad.dtype objects)
F32, F64, I64, BOOL = 0, 1, 2, 3

# ---- meta[tensor_id, :] -------------------------------------------------------
M_SID = 0        # storage id
M_OFF = 1        # element offset into the storage
M_NDIM = 2
M_DTYPE = 3
M_FLAGS = 4      # FL_* bits
M_ROW = 5        # producing tape row, -1 for leaves and tensors without history
M_OIDX = 6       # which output of that row
M_REFS = 7       # Python wrappers + rows + side table + pins holding this id
M_GRAD = 8       # side table: id of .grad (leaves) / retained grad (non-leaves), -1
M_NUMEL = 9
M_SRCOP = 10     # saved aliases: opcode of the row whose output was saved (for messages), -1
M_SRCIDX = 11
M_GTMP = 12      # during a sweep: storage id of a leaf's / captured tensor's gradient
M_NEXT = 13      # free-list link
M_VSID = 14      # storage whose version counter this tensor uses: M_SID, except for .data
M_BASE = 15      # a view's base (what it was made from, or that one's base; the view holds
                 # a reference on it), -1 for tensors that are not views
M_SHAPE = 16
M_STRIDE = 24
MW = 32

FL_REQ = 1       # requires_grad
FL_RETAIN = 2    # retain_grad() was called
FL_CAPTURE = 4   # autograd.grad() wants this tensor's gradient
FL_VIEW = 8      # a view of a tensor that requires grad
FL_VIEWLEAF = 16 # a view of a leaf that requires grad
FL_HOOK = 32     # a leaf with tensor hooks: its gradient gathers in M_GTMP, Python hands
                 # it to the hooks and then accumulates it into .grad
FL_PLAINVIEW = 64  # a view of a tensor that does not require grad: an in-place op that
                   # recorded into it would give it a history its base never sees
FL_HVIEW = 128   # a view whose history follows its base's in-place changes (one with a
                 # history, one made in grad mode of a tensor without one, or one made under
                 # no_grad), counted in its storage's S_HVIEWS
FL_NOGRADVIEW = 256  # a view made under no_grad, or a view of one
FL_MULTIVIEW = 1024  # a view made in grad mode of an output of a multi-view op (split,
                     # unbind: OF_MULTIVIEW), or of such a view: it follows their rules
FL_STALE = 512   # ... whose version counter then moved: PyTorch forbids using it where a
                 # gradient could flow, if its base requires grad (E_STALE_VIEW)

# ---- storage[storage_id, :] ---------------------------------------------------
S_ADDR = 0
S_NBYTES = 1
S_REFS = 2
S_VERSION = 3    # the version counter lives with the storage: views and detach() share it
S_KIND = 4       # 0 malloc'ed by tapegrad, 1 adopted NumPy memory (Python keeps the array),
                 # 2 a version counter only (what .data counts with), 3 a block of a
                 # compiled replay's arena (the plan owns the memory)
S_NEXT = 5
S_OCC = 6        # kind 3 (a memory plan's arena block): address of the block's occupancy word
S_HVIEWS = 7     # live FL_HVIEW tensors over this storage: an in-place op recorded on their
                 # base re-derives their histories from the new one (op_entry, regen_views)
SW = 8

# ---- tape[row, :] -------------------------------------------------------------
R_OP = 0
R_REFS = 1       # output tensors + consumer rows + grad_fn wrappers holding this row
R_STATE = 2      # RS_* bits
R_NIN = 3
R_NOUT = 4
R_DEPS = 5       # sweep scratch: consumers not yet run
R_GBUF = 6       # sweep scratch: storage id holding the gradients of all outputs
R_ODTYPE = 7
R_ONDIM = 8
R_OSHAPE = 9     # 9..16: shape of (each) output
R_IN = 17        # per input k: R_IN + k*IW + (IN_T, IN_ROW, IN_OIDX, IN_SAVED, IN_VER)
IN_T = 0
IN_ROW = 1
IN_OIDX = 2
IN_SAVED = 3
IN_VER = 4
IN_ID = 5        # the input's id during the forward call only (not held afterwards)
IW = 6
R_OSAVED = R_IN + MAXIN * IW     # 35: alias of the saved output, -1
R_OVER = R_OSAVED + 1            # 36: its version at record time
R_IATTR = R_OVER + 1             # 37..48
R_S2 = R_IATTR + NIATTR - 1      # 48: the last int attribute holds a second scalar (float64
                                 #     bits) for ops with two (clamp, softplus)
R_NEXT = R_IATTR + NIATTR        # 49: free-list link
R_TAN = R_NEXT + 1               # 50: storage of a fused op's tangents (O_TANGENT), -1
RW = 56

RS_RELEASED = 1  # saved tensors freed by a backward without retain_graph
RS_MARK = 2      # reachable from the current roots
RS_LIVE = 8
RS_HOOK = 32     # an output has tensor hooks: the sweep pauses before the row runs
RS_SCALAR = 16   # its gradient reads the Python scalar operand (PyTorch saves that as a
                 # tensor, so a second backward through the row raises there too)
RS_NORUN = 64    # autograd.grad: an output is captured but no input leads to a captured
                 # tensor, so the row's hooks run and its gradient is taken, and its
                 # backward does not run (nor is it version-checked or released)

# ---- ctx[...]: one int64 array the kernels receive by address -------------------
C_META, C_META_CAP = 0, 1
C_STOR, C_STOR_CAP = 2, 3
C_TAPE, C_TAPE_CAP = 4, 5
C_FATTR = 6
C_IARGS = 7           # Python writes an op's int arguments here before the call
C_FWD = 8             # address of the table of forward kernel addresses
C_BWD = 9
C_OPINFO = 10         # address of opinfo[op, :]
C_META_FREE, C_STOR_FREE, C_TAPE_FREE = 11, 12, 13
C_OUTS = 14                   # address of outs[]: ids of the outputs an op produced
C_NOUTS = 15
C_MODE = 16                   # sweep mode: MODE_BACKWARD (accumulate .grad) or MODE_GRAD
C_OUTS_CAP = 17
C_ERR = 19                    # address of err[0:8]: details of the last failure
C_INPLACE = 21                # id an op must write into, -1
C_NRETAIN = 22                # tensors with FL_RETAIN set (the sweep scans only if > 0)
C_EXTQ = 23                   # address of the queue of released adopted storages
C_EXTN = 24
C_LIVE_ROWS = 25
C_LIVE_META = 26
C_LIVE_STOR = 27
C_BYTES = 28                  # bytes held by tapegrad-malloc'ed storages
C_WORK = 29                   # address of a scratch int64 array (work lists of the sweep)
C_WORK_CAP = 30
C_IARGS_CAP = 31
C_DESC = 32                   # address of desc[]: the operand layout handed to elementwise loops
C_RELQ = 33                   # address of relq[]: a ring of (id + 1) whose Python wrapper died;
C_RELTAIL = 34                #   Tensor.__del__ fills slots, the next compiled call releases them
C_RELQ_CAP = 35               #   in order from the tail and zeroes them (0 = empty slot)
C_SW_BUF = 36                 # the sweep's state, kept across a pause for a Python callback:
C_SW_CAP = 37                 #   buf = [stack | deliveries | captures | marked rows], cap each
C_SW_STATE = 38               # address of state[SW_*]
C_REC = 40                    # recording for tapegrad.compile: address of the event log
C_RECN = 41                   #   (0: not recording), words used (-1: it overflowed),
C_RECCAP = 42                 #   capacity; see EV_*
C_PLAN = 43                   # replaying with a memory plan: address of plan[], one entry per
C_PLANK = 44                  #   allocation in order (see PL_*), the next entry, the number
C_PLANN = 45                  #   of entries (0: no plan)
C_CLONE = 46                  # address of clone_entry, compiled when an op first needs it
C_WORKER = 47                 # elementwise loops on threads (see threads.py): the thread body's
C_NTHREADS = 39               #   address (0: one thread), the thread count, and the fewest
C_PAR_MIN = 18                #   elements worth a thread
C_NSPLIT = 20                 # loops split so far (a counter the tests read)
C_TANGENT = 48                # address of tangent_entry, compiled when a fused op first runs
C_OUTS_SOLO = 49              # address of outs_solo[] (C_OUTS_CAP long, see OPF_SOLO)
C_AS_STRIDED = 50             # opcode of as_strided: the row a view's history is re-derived as
C_PRUNE_FN = 53               # address of prune_entry, compiled when autograd.grad first runs
C_INPLACE_FN = 52             # address of inplace_entry, compiled when an op first writes in place
C_WANT_ROWS = 51              # table index + 1 of a row-broadcast kernel an op wanted and found
                              #   unloaded (it ran the strided loop): the next op asks Python
                              #   for it (E_NEED_KERNEL) before it starts (0: none)
C_MAX_BYTES = 56              # the largest storage stor_new allocates: a larger one is refused
                              #   before any memory is touched (sizes.py sets it: the machine's
                              #   memory and swap, which no tensor can exceed and be filled)
C_NOMEM_BYTES = 57            # the size of the last allocation refused (-1: its byte count
                              #   overflowed int64), for the MemoryError's message
C_NOMEM_COUNT = 58            # allocations refused so far: the sweep compares it with
C_SW_REFUSED = 59             #   C_SW_REFUSED (its value when the sweep started or resumed), as
                              #   a gradient buffer that could not be made reaches the row's
                              #   kernel as an address of 0 (no gradient wanted)
NCTX = 60

I64_MAX = 9223372036854775807     # no size, stride or byte count may exceed it

# ---- the recording log: what ran while tapegrad.compile recorded a function ----------
EV_BIRTH = 1      # [EV_BIRTH, id]: a tensor id was made (by anything)
EV_OP = 2         # [EV_OP, len, op, a, b, c, s bits, flags, nouts, outs..., iargs[0:EV_NIARG]]
EV_ALIAS = 3      # [EV_ALIAS, kind (0 detach, 1 .data), source, new]
EV_SWEEP = 4      # [EV_SWEEP, len, nroots, ncap, mode, retain, roots..., seeds...]
EV_ALLOC = 5      # [EV_ALLOC, storage, bytes]: only while measuring a memory plan
EV_FREE = 6       # [EV_FREE, storage]
EV_PY = 7         # [EV_PY, what, x, y]: logged by Python (optimizer steps, .grad reads...)
EV_NIARG = 36     # int arguments an op may read (forward-only ones end at 16 + 2 + 2*MAXD)

# ---- plan[k*PLW : (k+1)*PLW]: where the k-th allocation of a replayed step goes --------
PL_ADDR = 0       # address in the plan's arena, 0: malloc as usual (the buffer outlives
PL_BYTES = 1      #   the step); the size it was planned for (another size mallocs)
PL_OCC = 2        # address of the arena block's occupancy word (the storage using it, or
PLW = 4           #   0): a block still in use is never handed out twice

# ---- sweep state (persists while the sweep is paused for Python) -----------------
SW_NS, SW_ND, SW_NCAP, SW_NM, SW_RETAIN, SW_STATUS, SW_PENDING, SW_ACTIVE = range(8)
SW_ANOMALY = 8      # anomaly mode's NaN check on (set by Python, read once per sweep)
SWW = 9

# ---- opinfo[op, :] --------------------------------------------------------------
O_SAVES_IF = 0   # 0..2: what to save when input k requires grad (bit j: input j; SAVE_OUT)
O_DIFF = 3       # bit k: input k receives a gradient
O_SAVED_OUT = 4  # which output is saved when SAVE_OUT is wanted
O_KIND = 5       # KIND_CUSTOM: kernels take (ctx, row); KIND_EW: loops take (desc, 0)
O_TANGENT = 6    # > 0: a fused elementwise op (replay/fuse.py) whose recorded forward also
                 # writes d out / d input k, for this many inputs, into the row's R_TAN
                 # storage; its backward reads those instead of the saved operands
O_FLAGS = 7      # OF_* bits
OIW = 8
MAXOPS = 1024    # opcodes: the table's ops, then fused ops made by compiled replays
OF_MULTIVIEW = 1  # its outputs are views of one input (split, unbind): PyTorch refuses
                  # in-place writes into them, and their history once their base changed
OF_OVERLAP_OK = 2  # in place, it writes each element without reading any (fill_, zero_):
                   # a tensor whose elements share memory (expanded) may be written
SAVE_OUT = 1 << 7
KIND_CUSTOM, KIND_EW, KIND_PY = 0, 1, 2   # KIND_PY: autograd.Function, backward in Python
NKSLOT = 4       # kernel tables hold slots per op: op * 4 + (dtype == F64), and + 2 for that
                 # dtype's row-broadcast loops (KSLOT_ROWS)
KSLOT_ROWS = 2   # a binary elementwise op's loops for an operand broadcast along the inner dim
                 # (call_ew), compiled when first wanted; -1 in the table: the op has none
KSLOT_CLONE = -1  # E_NEED_KERNEL with err[1] == this: compile clone_entry (see C_CLONE)
KSLOT_TANGENT = -2  # ... tangent_entry (see C_TANGENT)
KSLOT_INPLACE = -3  # ... inplace_entry (see C_INPLACE_FN)
KSLOT_PRUNE = -4  # ... prune_entry (see C_PRUNE_FN)
IP_CHECK, IP_GRAD, IP_RECORD, IP_OP_SHIFT = 1, 2, 4, 3    # inplace_entry's what

# op_entry flags
OPF_GRAD = 1        # grad mode is on
OPF_INPLACE = 2     # write into input a
OPF_IN2 = 4         # a third input: its id is iargs[IA_IN2]
OPF_SOLO = 8        # a call without the engine lock (Python's one-call paths): its outputs go
                    # to outs_solo, so a locked caller reading outs[] after its own call
                    # (multi-output ops, autograd.grad) never finds another thread's there
IA_IN2 = NIATTR     # iargs beyond NIATTR are not copied into the row

MODE_BACKWARD = 0   # leaves accumulate into .grad
MODE_GRAD = 1       # autograd.grad: only FL_CAPTURE tensors receive (into M_GTMP)

# ---- status codes ------------------------------------------------------------------
# op_entry returns an id (>= 0) or a code < 0; kernels return K_OK, because a C function
# whose compiled code raised returns 0, which must never pass for success.
K_OK = 1
E_NEED_KERNEL = -1
E_GROW_META = -2
E_GROW_STOR = -3
E_GROW_TAPE = -4
E_NOMEM = -5          # an allocation was refused: ctx[C_NOMEM_BYTES] holds its size
E_SHAPE = -10         # broadcast or shape mismatch (Python reads the shapes for the message)
E_DTYPE = -11
E_LEAF_INPLACE = -12
E_VERSION = -13       # err = (row, saved id, version now, version expected, input index)
E_FREED = -14         # backward through released saved tensors: err = (row,)
E_INPLACE_SHAPE = -15
E_VIEW_INPLACE = -18
E_KERNEL = -19        # a kernel failed without a status (an exception in compiled code)
E_OVERLAP = -20       # in-place: an operand partially overlaps the written tensor
E_SELF_OVERLAP = -21  # in-place: the written tensor has elements sharing memory
E_VALUE = -22         # an input value out of an op's domain: err = (op, the value as float bits)
E_CALLBACK = -23      # the sweep paused for Python: err = (row, CB_* bits); resume or abort
E_VIEWS_LAYOUT = -24  # in-place on a non-contiguous tensor whose views have histories
E_STALE_VIEW = -25    # an FL_STALE view used as an op input in grad mode: err = (id,)
E_NOGRAD_VIEW_INPLACE = -26  # in-place in grad mode on a view made under no_grad
E_FALLBACK = -27     # a replay's fused op does not apply to these operands (nothing was made):
                     # the executor runs the ops it replaced instead (replay/_run.I_ALT)
E_OVERFLOW = -28     # a tensor's size overflows int64: err = (ndim, shape[0:ndim] at 1..8, item
                     # size at 9: 0 for a view, whose element count overflowed)
E_ANOMALY = -29      # anomaly mode: a row's backward wrote NaN into an input's gradient:
                     # err = (row, input index)
CB_HOOKS, CB_FUNCTION = 1, 2

# ---- desc[...]: what an elementwise loop needs, prepared once by the engine ----------
D_N = 0          # elements in the index space
D_ND = 1
D_FLAT = 2       # every operand contiguous over the index space
D_BSCAL = 3      # b is the Python scalar (stored at D_SCAL in the operands' dtype)
D_W0 = 4         # backward: input 0 wants a gradient: 1 add into its buffer, 2 write it
                 # (the loop is the first writer of an unzeroed buffer)
D_W1 = 5
D_ADDR = 8       # 8..13: addresses of A, B, O, G, GA, GB
D_SPAN = 14      # 14..19: their extents in elements
D_SHAPE = 20     # 20..27
D_ST = 28        # 28..75: strides, 6 rows (A, B, O, G, GA, GB) of MAXD
D_IDX = 76       # 76..83: scratch, so that no kernel allocates a small shape array: the
                 # input shapes of a backward's set-up, matmul's output shape
D_S = 84         # the scalar attribute as float64 bits
D_SCAL = 85      # the scalar operand in the operands' dtype (a one-element array)
D_S2 = 86        # the second scalar attribute (R_S2) as float64 bits
DW = 88
