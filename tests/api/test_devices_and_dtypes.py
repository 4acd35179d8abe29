"""Devices, dtypes and out= as PyTorch spells them, for a library that runs on the CPU:
tapegrad.device (PyTorch's parser, messages, equality, str/repr, context manager), device=
on every factory, Tensor.device/is_cuda/cuda(), to(device), Module.to/cpu/cuda,
set_default_device; tapegrad.cuda, backends, accelerator as PyTorch's CPU-only build
answers; the dtypes PyTorch names (those tapegrad has no tensors of exist, and making such
a tensor is refused), set_default_dtype, finfo/iinfo; out= on add, sub, mul, div, matmul,
sum, cat, stack and the factories. Tests named *_match_torch compare with the installed
PyTorch (skipped without it); the others hold exact values and run without it."""
import pickle
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tests.helpers import dtype_name, raised, run_both


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def defaults_are_restored():
    """Every test leaves the default dtype and device as it found them (in PyTorch too)."""
    yield
    tg.set_default_dtype(tg.float32)
    tg.set_default_device(None)
    try:
        import torch
    except ImportError:
        return
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)


def _same_error(ours, theirs):
    """Our (type, message) against PyTorch's: an instance of PyTorch's type, and the same
    first line once 'torch' is spelt 'tapegrad'."""
    (t1, m1), (t2, m2) = ours, theirs
    assert t2 is not None and t1 is not None, (ours, theirs)
    assert issubclass(t1, t2), (t1, t2)
    assert m1.replace("tapegrad", "torch").split("\n")[0] == m2.split("\n")[0]


# ---------------------------------------------------------------- tapegrad.device
DEVICES = [
    (("cpu",), {}), (("cpu", 0), {}), (("cpu:0",), {}), ((), {"type": "cpu"}),
    ((), {"type": "cpu", "index": 0}), (("cpu",), {"index": None}), (("cpu", 1), {}),
    (("cpu:1",), {}), ((b"cpu",), {}), (("cuda",), {}), (("cuda:1",), {}),
    (("cuda", 2), {}), (("cuda:10",), {}), (("mps",), {}), (("meta",), {}),
    (("xpu",), {}), (("xla:3",), {}), (("hpu",), {}), (("privateuseone",), {}),
    (("cpu", np.int64(0)), {}), ((), {"device": "cpu"}),
]


@pytest.mark.parametrize("args, kwargs", DEVICES, ids=[repr(d) for d in DEVICES])
def test_device_objects_match_torch(torch, args, kwargs):
    ours, theirs = tg.device(*args, **kwargs), torch.device(*args, **kwargs)
    assert (str(ours), repr(ours), ours.type, ours.index) == \
        (str(theirs), repr(theirs), theirs.type, theirs.index)
    assert tg.device(ours) == ours and str(tg.device(device=ours)) == str(theirs)


INVALID = [("gpu",), ("CPU",), (" cpu",), ("cpu:01",), ("cuda:00",), ("cuda:0:1",),
           ("cpu:",), (":0",), ("cuda:-1",), ("cpu:+1",), ("cpu:1 ",), ("",), ("ort",),
           ("cuda:99999999999999999999",), ("cpu", -1), ("cpu", -2), ("cpu:0", 0),
           (0,), (1,), (-1,), (np.int64(0),), ("cpu", "0"), ("cpu", True), ("cpu", 0.0),
           ("cpu", 2 ** 63), (None,), (1.0,), (True,), ()]


@pytest.mark.parametrize("args", INVALID, ids=[repr(a) for a in INVALID])
def test_invalid_devices_match_torch(torch, args):
    _same_error(raised(lambda L: L.device(*args), tg),
                raised(lambda L: L.device(*args), torch))


def test_device_keywords_and_copies_are_checked_as_in_torch(torch):
    for prog in (lambda L: L.device("cpu", foo=1), lambda L: L.device("cpu", 0, 1)):
        assert raised(prog, tg)[0] is raised(prog, torch)[0] is TypeError
    for prog in (lambda L: L.device(L.device("cpu"), 0),
                 lambda L: L.device("cpu", index=L.tensor(1.5))):
        _same_error(raised(prog, tg), raised(prog, torch))


def test_device_equality_hash_and_immutability():
    cpu = tg.device("cpu")
    assert cpu == tg.device(type="cpu") and hash(cpu) == hash(tg.device("cpu"))
    assert cpu != tg.device("cpu", 0) and tg.device("cpu:0") == tg.device("cpu", 0)
    assert cpu != "cpu" and cpu != tg.device("cuda") and {cpu: 1}[tg.device("cpu")] == 1
    assert f"{cpu:>5}" == "  cpu" and str(tg.device("cuda", 1)) == "cuda:1"
    with pytest.raises(AttributeError, match="attribute 'type' of 'tapegrad.device' objects "
                                             "is not writable"):
        cpu.type = "cuda"
    with pytest.raises(AttributeError, match="has no attribute 'foo'"):
        cpu.foo = 1
    with pytest.raises(TypeError, match="not an acceptable base type"):
        type("MyDevice", (tg.device,), {})
    for d in (cpu, tg.device("cuda:1"), tg.device("cpu", 0)):
        assert pickle.loads(pickle.dumps(d)) == d


def test_mkldnn_device_warns_as_in_torch():
    with pytest.warns(UserWarning, match="'mkldnn' is no longer used as device type"):
        assert str(tg.device("mkldnn")) == "mkldnn"


def test_device_is_a_context_manager_for_the_default_device():
    assert tg.get_default_device() == tg.device("cpu")
    with tg.device("cpu", 1) as d:
        assert d == tg.device("cpu", 1) and tg.get_default_device() == d
        with tg.device("cpu"):
            assert tg.get_default_device() == tg.device("cpu")
        assert tg.get_default_device() == d
        assert tg.zeros(2).device == tg.device("cpu")
    assert tg.get_default_device() == tg.device("cpu")
    with pytest.raises(AssertionError, match="not compiled with CUDA enabled"):
        with tg.device("cuda"):
            pass                # never reached: the block refuses to start
    assert tg.get_default_device() == tg.device("cpu")


def test_default_device_matches_torch(torch):
    for arg in ("cpu:1", "cpu", None):
        tg.set_default_device(arg)
        torch.set_default_device(arg)
        assert repr(tg.get_default_device()) == repr(torch.get_default_device())
    tg.set_default_device(tg.device("cpu"))
    assert tg.get_default_device() == tg.device("cpu")
    for arg in (1.5, "gpu", 0):
        prog = lambda L, arg=arg: L.set_default_device(arg)     # noqa: E731
        _same_error(raised(prog, tg), raised(prog, torch))


# ---------------------------------------------------------------- placing tensors
NOT_COMPILED = [("cuda", "CUDA"), ("cuda:1", "CUDA"), ("xpu", "XPU"), ("mtia", "MTIA")]
NOT_LINKED = ["mps", "meta", "xla", "vulkan", "hip", "hpu", "lazy", "privateuseone"]


def _placements(where):
    """Every way of putting a tensor on device `where`."""
    x = tg.ones(2)
    m = nn.Linear(2, 2)
    return [lambda: x.to(where), lambda: x.to(device=where), lambda: x.to(where, tg.float64),
            lambda: x.to(tg.device(where)), lambda: tg.zeros(2, device=where),
            lambda: tg.tensor([1.0], device=where), lambda: m.to(where),
            lambda: m.to(device=tg.device(where)), lambda: tg.set_default_device(where),
            lambda: tg.device(where).__enter__(), lambda: nn.Linear(2, 2, device=where),
            lambda: x.new_zeros(2, device=where)]


@pytest.mark.parametrize("where, name", NOT_COMPILED)
def test_cuda_xpu_mtia_are_refused_as_torch_refuses_them(where, name):
    """PyTorch's CPU build raises AssertionError ("Torch not compiled with CUDA enabled");
    tapegrad's error is that and a RuntimeError, naming the device."""
    for place in _placements(where):
        with pytest.raises(AssertionError) as info:
            place()
        assert isinstance(info.value, RuntimeError)
        assert str(info.value).startswith(f"tapegrad not compiled with {name} enabled: "
                                          "tapegrad runs on the CPU only")
        assert f"device '{where}'" in str(info.value)
    assert tg.get_default_device() == tg.device("cpu")


@pytest.mark.parametrize("where", NOT_LINKED)
def test_other_devices_are_refused_with_a_runtime_error(where):
    for place in _placements(where):
        with pytest.raises(RuntimeError, match=f"tapegrad is not linked with support for "
                                               f"{where} devices: tapegrad runs on the CPU "
                                               f"only and cannot place a tensor on device "
                                               f"'{where}'"):
            place()


def test_placement_errors_match_torch_types(torch):
    x_progs = [lambda L: L.ones(2).to("cuda"), lambda L: L.ones(2).to("cuda:1"),
               lambda L: L.ones(2).cuda(), lambda L: L.ones(2).cuda("cuda:0"),
               lambda L: L.zeros(2, device="cuda"), lambda L: L.nn.Linear(2, 2).cuda(),
               lambda L: L.nn.Linear(2, 2).to("cuda"), lambda L: L.ones(2).to("mps"),
               lambda L: L.ones(2).to("xla"), lambda L: L.ones(2).to("xpu"),
               lambda L: L.tensor([1], device="cuda"), lambda L: L.eye(2, device="cuda"),
               lambda L: L.ones(2).new_zeros(2, device="cuda")]
    for prog in x_progs:
        (t1, m1), (t2, m2) = raised(prog, tg), raised(prog, torch)
        assert t2 is not None and issubclass(t1, t2), (prog, t1, t2)
        assert m2.split(":")[0].replace("PyTorch", "tapegrad").replace("Torch", "tapegrad") \
            in m1
    # an int device is an accelerator index: PyTorch's RuntimeError, there being none
    for prog in (lambda L: L.ones(2).to(0), lambda L: L.ones(2).to(device=1),
                 lambda L: L.ones(2).to(-1), lambda L: L.ones(2).cuda(1),
                 lambda L: L.nn.Linear(2, 2).cuda(0), lambda L: L.nn.Linear(2, 2).to(0),
                 lambda L: L.zeros(2, device=0), lambda L: L.zeros(2, device=-1),
                 lambda L: L.zeros(2, device="gpu"), lambda L: L.zeros(2, device=1.0)):
        _same_error(raised(prog, tg), raised(prog, torch))


def _factories(device):
    """Every non-random factory, with device=."""
    x = tg.ones(2, 3)
    return {
        "tensor": lambda: tg.tensor([1.0, 2.0], device=device),
        "as_tensor": lambda: tg.as_tensor([1.0, 2.0], device=device),
        "empty": lambda: tg.empty(2, device=device),
        "zeros": lambda: tg.zeros(2, 3, device=device),
        "ones": lambda: tg.ones((2, 3), device=device),
        "full": lambda: tg.full((2,), 1.5, device=device),
        "arange": lambda: tg.arange(0, 3, device=device),
        "eye": lambda: tg.eye(3, device=device),
        "linspace": lambda: tg.linspace(0, 1, 5, device=device),
        "zeros_like": lambda: tg.zeros_like(x, device=device),
        "ones_like": lambda: tg.ones_like(x, device=device),
        "empty_like": lambda: tg.empty_like(x, device=device),
        "full_like": lambda: tg.full_like(x, 2.0, device=device),
        "new_zeros": lambda: x.new_zeros(2, device=device),
        "new_ones": lambda: x.new_ones(2, device=device),
        "new_empty": lambda: x.new_empty(2, device=device),
        "new_full": lambda: x.new_full((2,), 3.0, device=device),
        "new_tensor": lambda: x.new_tensor([1.0], device=device),
        "Linear": lambda: nn.Linear(2, 3, device=device).weight,
    }


@pytest.mark.parametrize("device", ["cpu", "cpu:0", tg.device("cpu"), tg.device("cpu", 3),
                                    None], ids=repr)
def test_every_factory_takes_a_cpu_device(device):
    for name, make in _factories(device).items():
        assert make().device == tg.device("cpu"), name


@pytest.mark.parametrize("device", ["cuda", tg.device("cuda", 1), "mps", 0])
def test_every_factory_refuses_other_devices(device):
    for make in _factories(device).values():
        with pytest.raises(RuntimeError):
            make()


def test_misspelt_device_keywords_stay_type_errors():
    x = tg.ones(2)
    for call in (lambda: tg.zeros(2, devise="cpu"), lambda: tg.tensor([1.0], dev="cpu"),
                 lambda: x.to(devise="cpu"), lambda: x.cuda(foo=1), lambda: x.cpu(foo=1),
                 lambda: tg.add(x, x, outt=x), lambda: x.add(x, out=x),
                 lambda: x.sum(0, out=x), lambda: tg.tensor([1.0], out=x),
                 lambda: tg.zeros_like(x, out=x), lambda: tg.set_default_dtype(d=tg.float64)):
        with pytest.raises(TypeError):
            call()


def test_tensor_device_attributes_match_torch(torch):
    def attrs(L):
        x = L.ones(2)
        return (str(x.device), repr(x.device), x.device.type, x.device.index, x.is_cpu,
                x.is_cuda, x.is_meta, x.is_mps, x.is_xpu, x.get_device(),
                x.to("cpu") is x, x.cpu() is x, x.to(L.device("cpu", 3)) is x,
                str(x.to("cpu:1").device), str(L.zeros(2, device="cpu:1").device))
    assert run_both(attrs)[0] == run_both(attrs)[1]
    assert isinstance(tg.ones(2).device, tg.device)


def test_to_with_a_device_takes_every_pytorch_form():
    x = tg.ones(2)
    cpu = tg.device("cpu")
    assert x.to(cpu) is x and x.to("cpu") is x and x.to(device=cpu) is x and x.to(None) is x
    assert x.to(b"cpu") is x and x.to(device=None) is x
    assert x.to(cpu, tg.float64).dtype is tg.float64
    assert x.to(cpu, tg.float64, True, True).dtype is tg.float64
    assert x.to(device="cpu", dtype=tg.float64).dtype is tg.float64
    y = x.to(cpu, copy=True)
    assert y is not x and y.device == cpu
    m = nn.Linear(2, 2)
    assert m.to(cpu) is m and m.cpu() is m and m.to("cpu", tg.float64) is m
    assert m.weight.dtype is tg.float64 and m.weight.device == cpu


# ---------------------------------------------------------------- cuda, backends, accelerator
def _backend_answers(L):
    return (L.cuda.is_available(), L.cuda.device_count(), L.cuda.is_initialized(),
            L.cuda.manual_seed(3), L.cuda.manual_seed_all(3), L.cuda.manual_seed(1.5),
            L.cuda.seed(), L.cuda.seed_all(), L.cuda.empty_cache(), L.cuda.memory_allocated(),
            L.cuda.max_memory_allocated(), L.cuda.is_bf16_supported(),
            L.backends.mps.is_available(), L.backends.mps.is_built(),
            L.backends.cudnn.is_available(), L.backends.cudnn.version(),
            L.backends.cudnn.enabled, L.backends.cudnn.benchmark,
            L.backends.cudnn.deterministic, L.backends.cudnn.allow_tf32,
            L.backends.cuda.is_built(), L.backends.cuda.matmul.allow_tf32,
            L.accelerator.is_available(), L.accelerator.current_accelerator(),
            L.accelerator.device_count())


def test_cuda_backends_and_accelerator_answer_as_torch_cpu_build(torch):
    ours, theirs = run_both(_backend_answers)
    assert ours == theirs
    for prog in (lambda L: L.cuda.synchronize(), lambda L: L.cuda.current_device(),
                 lambda L: L.cuda.get_device_name(), lambda L: L.cuda.manual_seed("a"),
                 lambda L: L.cuda.manual_seed_all(),
                 lambda L: L.accelerator.current_device_index(),
                 lambda L: L.accelerator.synchronize()):
        t1, t2 = raised(prog, tg)[0], raised(prog, torch)[0]
        assert t2 is not None and issubclass(t1, t2), (t1, t2)


def test_tutorial_device_lines_pick_the_cpu():
    device = "cuda" if tg.cuda.is_available() else "mps" if tg.backends.mps.is_available() \
        else "cpu"
    assert device == "cpu"
    device = tg.accelerator.current_accelerator() if tg.accelerator.is_available() else "cpu"
    assert tg.ones(2).to(device).device == tg.device("cpu")
    tg.backends.cudnn.deterministic = True
    tg.backends.cudnn.benchmark = False
    tg.backends.cuda.matmul.allow_tf32 = True
    assert tg.backends.cudnn.deterministic and not tg.backends.cudnn.benchmark
    tg.backends.cudnn.deterministic = False
    tg.backends.cuda.matmul.allow_tf32 = False
    assert tg.cuda.manual_seed(0) is None and tg.cuda.manual_seed_all(0) is None


# ---------------------------------------------------------------- dtypes
DTYPE_NAMES = ["float32", "float", "float64", "double", "int64", "long", "bool", "float16",
               "half", "bfloat16", "complex32", "chalf", "complex64", "cfloat", "complex128",
               "cdouble", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "short",
               "int32", "int", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
               "float8_e5m2fnuz"]


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_dtype_objects_match_torch(torch, name):
    ours, theirs = getattr(tg, name), getattr(torch, name)
    assert repr(ours) == repr(theirs).replace("torch", "tapegrad") == str(ours)
    for attr in ("itemsize", "is_floating_point", "is_complex", "is_signed"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert dtype_name(ours.to_real()) == dtype_name(theirs.to_real())
    t1, m1 = raised(lambda L: getattr(L, name).to_complex(), tg)
    t2, m2 = raised(lambda L: getattr(L, name).to_complex(), torch)
    if t2 is None:
        assert dtype_name(ours.to_complex()) == dtype_name(theirs.to_complex())
    else:
        assert (t1, m1) == (t2, m2)
    assert pickle.loads(pickle.dumps(ours)) is ours


def test_dtype_aliases_and_comparisons():
    assert tg.half is tg.float16 and tg.int is tg.int32 and tg.short is tg.int16
    assert tg.cfloat is tg.complex64 and tg.cdouble is tg.complex128 and tg.chalf is \
        tg.complex32 and tg.float is tg.float32 and tg.double is tg.float64
    x = tg.ones(2)
    assert x.dtype == tg.float32 and x.dtype != tg.int32 and x.dtype not in (tg.half,
                                                                            tg.bfloat16)
    assert tg.ones(2, dtype=tg.long).dtype == tg.int64 != tg.int32
    assert isinstance(tg.int32, tg.dtype) and tg.float16.is_floating_point


UNSUPPORTED = [("int32", "int64"), ("float16", "float32 or float64"),
               ("bfloat16", "float32 or float64"), ("uint8", "int64 or bool"),
               ("int8", "int64"), ("int16", "int64"), ("complex64", "no complex dtype")]


@pytest.mark.parametrize("name, hint", UNSUPPORTED)
def test_making_a_tensor_of_an_unsupported_dtype_is_refused(name, hint):
    dt = getattr(tg, name)
    x = tg.ones(2)
    calls = {"tensor": lambda: tg.tensor([1, 2], dtype=dt),
             "zeros": lambda: tg.zeros(2, dtype=dt), "ones": lambda: tg.ones(2, dtype=dt),
             "empty": lambda: tg.empty(2, dtype=dt), "full": lambda: tg.full((2,), 1, dtype=dt),
             "arange": lambda: tg.arange(3, dtype=dt), "eye": lambda: tg.eye(2, dtype=dt),
             "linspace": lambda: tg.linspace(0, 1, 3, dtype=dt),
             "zeros_like": lambda: tg.zeros_like(x, dtype=dt),
             "full_like": lambda: tg.full_like(x, 1, dtype=dt),
             "as_tensor": lambda: tg.as_tensor([1], dtype=dt),
             "to": lambda: x.to(dt), "type": lambda: x.type(dt),
             "new_zeros": lambda: x.new_zeros(2, dtype=dt),
             "sum": lambda: x.sum(dtype=dt), "Linear": lambda: nn.Linear(2, 2, dtype=dt)}
    for fn, call in calls.items():
        with pytest.raises(TypeError) as info:
            call()
        msg = str(info.value)
        assert f"tapegrad.{name} is not supported: tapegrad tensors are float32, float64, " \
               f"int64 or bool (use {hint})" in msg, (fn, msg)


def test_casting_methods_of_unsupported_dtypes_are_refused():
    x = tg.ones(2)
    for method, name in (("half", "float16"), ("bfloat16", "bfloat16"), ("int", "int32"),
                         ("short", "int16"), ("char", "int8"), ("byte", "uint8"),
                         ("cfloat", "complex64"), ("cdouble", "complex128")):
        with pytest.raises(TypeError, match=rf"^{method}\(\): tapegrad.{name} is not "
                                            r"supported"):
            getattr(x, method)()
    for spelling in ("torch.IntTensor", "torch.HalfTensor"):
        with pytest.raises(TypeError, match="is not supported"):
            x.type(spelling)
    with pytest.raises(TypeError, match="tapegrad.float16 is not supported"):
        nn.Linear(2, 2).to(tg.float16)


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16", "complex64"])
def test_finfo_matches_torch(torch, name):
    ours, theirs = tg.finfo(getattr(tg, name)), torch.finfo(getattr(torch, name))
    assert repr(ours) == repr(theirs) and str(ours) == str(theirs)
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                 "dtype"):
        a, b = getattr(ours, attr), getattr(theirs, attr)
        assert a == b and type(a) is type(b), attr


@pytest.mark.parametrize("name", ["int64", "int32", "int16", "int8", "uint8", "uint64"])
def test_iinfo_matches_torch(torch, name):
    ours, theirs = tg.iinfo(getattr(tg, name)), torch.iinfo(getattr(torch, name))
    assert repr(ours) == repr(theirs)
    for attr in ("bits", "max", "min", "dtype"):
        a, b = getattr(ours, attr), getattr(theirs, attr)
        assert a == b and type(a) is type(b), attr


def test_finfo_iinfo_errors_match_torch(torch):
    for prog in (lambda L: L.finfo(L.int64), lambda L: L.finfo(L.bool),
                 lambda L: L.iinfo(L.float32), lambda L: L.iinfo(L.bool),
                 lambda L: L.finfo("float32"), lambda L: L.finfo(None),
                 lambda L: L.iinfo(None), lambda L: L.finfo(1.0)):
        _same_error(raised(prog, tg), raised(prog, torch))


def test_finfo_values_without_torch():
    f = tg.finfo(tg.float32)
    assert (f.bits, f.eps, f.max, f.tiny, f.resolution, f.dtype) == \
        (32, 2.0 ** -23, float(np.finfo(np.float32).max), 2.0 ** -126, 1e-06, "float32")
    assert tg.finfo() == tg.finfo(tg.float32) and tg.finfo(float).dtype == "float64"
    tg.set_default_dtype(tg.float64)
    assert tg.finfo().eps == 2.0 ** -52
    assert tg.iinfo(tg.int64).max == 2 ** 63 - 1 and tg.iinfo(int).min == -2 ** 63


# ---------------------------------------------------------------- the default dtype
def test_set_default_dtype_errors_match_torch(torch):
    for prog in (lambda L: L.set_default_dtype(L.int64), lambda L: L.set_default_dtype(L.bool),
                 lambda L: L.set_default_dtype(L.complex64),
                 lambda L: L.set_default_dtype(float), lambda L: L.set_default_dtype(None),
                 lambda L: L.set_default_dtype("float64"), lambda L: L.set_default_dtype(),
                 lambda L: L.set_default_dtype(dtype=L.float64)):
        _same_error(raised(prog, tg), raised(prog, torch))
    assert tg.get_default_dtype() is tg.float32


def test_float16_default_dtype_is_refused_not_ignored():
    for dt in (tg.float16, tg.bfloat16):
        with pytest.raises(TypeError, match=f"tapegrad.{dt.name} is not supported: the "
                                            "default dtype is float32 or float64"):
            tg.set_default_dtype(dt)
    assert tg.get_default_dtype() is tg.float32


def _made_with_the_default(L):
    """The dtypes (by name) of what factories, promotion and layers make without a dtype,
    and how tensors print."""
    x, i = L.ones(2, dtype=L.float32), L.tensor([1, 2])
    made = [L.tensor([1.0]), L.tensor(1.5), L.tensor([]), L.tensor([[1, 2.5]]),
            L.tensor([np.float32(1.0)]), L.tensor([np.float32(1.0), 2.0]),
            L.tensor(np.float32(2)), L.tensor([np.float64(1.0)]), L.zeros(2), L.ones(2),
            L.empty(2), L.full((2,), 1.5), L.full((2,), 1), L.arange(3.0), L.arange(3),
            L.arange(0, 1, 0.5), L.eye(2), L.linspace(0, 1, 3), L.as_tensor([1.0]),
            i * 2.5, i / 2, i.exp(), i.sigmoid(), x * 2.5, x + L.tensor(1.5),
            L.nn.Linear(2, 2).weight, L.nn.LayerNorm(2).weight, x.new_tensor([1.5]),
            L.zeros_like(x), L.tensor([True])]
    return ([dtype_name(t.dtype) for t in made], dtype_name(L.get_default_dtype()),
            repr(L.tensor([1.0])), repr(x), repr(L.tensor([])), repr(L.ones(0)))


@pytest.mark.parametrize("default", ["float32", "float64"])
def test_factories_and_promotion_follow_the_default_dtype_as_torch(torch, default):
    tg.set_default_dtype(getattr(tg, default))
    torch.set_default_dtype(getattr(torch, default))
    ours, theirs = _made_with_the_default(tg), _made_with_the_default(torch)
    assert ours[:2] == theirs[:2]
    assert [r.replace("tapegrad", "torch") for r in ours[2:]] == list(theirs[2:])


def test_default_dtype_float64_without_torch():
    tg.set_default_dtype(tg.float64)
    assert tg.get_default_dtype() is tg.float64
    assert tg.tensor([1.0]).dtype is tg.float64 and tg.zeros(2).dtype is tg.float64
    assert tg.arange(0.5, 2).dtype is tg.float64 and tg.arange(2).dtype is tg.int64
    assert (tg.tensor([1, 2]) / 2).dtype is tg.float64
    assert repr(tg.tensor([0.5])) == "tensor([0.5000])"
    assert repr(tg.tensor([0.5], dtype=tg.float32)) == "tensor([0.5000], dtype=tapegrad.float32)"
    tg.set_default_dtype(tg.float32)
    assert tg.tensor([1.0]).dtype is tg.float32 and tg.zeros(2).dtype is tg.float32


# ---------------------------------------------------------------- out=
def _run_out(L, setup, expr):
    """expr evaluated after setup in library L: (values, out's shape, out's dtype, whether
    expr returned out, the warnings' messages) or (exception type, message)."""
    ns = {"L": L, "a": L.ones(2, 3), "b": L.full((2, 3), 0.5), "i": L.ones(2, 3,
          dtype=L.int64), "w": L.ones(2, 3, requires_grad=True), "np": np}
    exec(setup, ns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = eval(expr, ns)
        except Exception as e:      # noqa: BLE001
            return type(e), str(e).split("\n")[0]
    o = ns.get("o")
    return (np.asarray(r.detach().numpy(), np.float64).tolist(), tuple(o.shape),
            dtype_name(o.dtype), r is o, [str(w.message) for w in caught])


OUT_CASES = [
    ("o = L.empty(2, 3)", "L.add(a, b, out=o)"),
    ("o = L.empty(0)", "L.add(a, b, out=o)"),
    ("o = L.empty(5)", "L.add(a, b, out=o)"),
    ("o = L.empty(3, 2)", "L.add(a, b, out=o.t())"),
    ("o = L.empty(2, 3, dtype=L.float64)", "L.add(a, b, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.add(a, b, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.add(i, i, out=o)"),
    ("o = L.empty(2, 3)", "L.add(i, i, out=o)"),
    ("o = L.empty(2, 3, dtype=L.bool)", "L.add(i, i, out=o)"),
    ("o = L.empty(2, 3)", "L.add(a, b, alpha=2, out=o)"),
    ("o = L.empty(2, 3)", "L.add(a, 2, out=o)"),
    ("o = L.empty(2, 3)", "L.add(2, a, out=o)"),
    ("o = L.empty(2, 3)", "L.add(input=a, other=b, out=o)"),
    ("o = L.empty(2, 3)", "L.add(w, b, out=o)"),
    ("o = L.empty(2, 3, requires_grad=True)", "L.add(a, b, out=o)"),
    ("o = L.empty(2, 3); L.set_grad_enabled(False)", "L.add(w, b, out=o)"),
    ("o = L.empty(2, 3)", "L.add(a, b, out='x')"),
    ("o = L.empty(2, 3)", "L.add(a, b, out=[o])"),
    ("o = L.empty(3).expand(2, 3)", "L.add(a, b, out=o)"),
    ("o = L.empty(2, 3)", "L.sub(a, b, alpha=2, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.sub(i, i, out=o)"),
    ("o = L.empty(2, 3)", "L.mul(a, b, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.mul(a, b, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.mul(i, 2.5, out=o)"),
    ("o = L.empty(2, 3, dtype=L.bool)", "L.mul(i > 0, i > 0, out=o)"),
    ("o = L.empty(2, 3, dtype=L.float64)", "L.div(a, b, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.div(i, i, out=o)"),
    ("o = L.empty(2, 2)", "L.matmul(a, b.T, out=o)"),
    ("o = L.empty(2, 3)", "L.matmul(a, b.T, out=o)"),
    ("o = L.empty(2, 2, dtype=L.float64)", "L.matmul(a, b.T, out=o)"),
    ("o = L.empty(2, 2, dtype=L.int64)", "L.matmul(a, b.T, out=o)"),
    ("o = L.empty(2, 2)", "L.matmul(w, b.T, out=o)"),
    ("o = L.empty(2)", "L.matmul(a, b[0], out=o)"),
    ("o = L.empty(2, dtype=L.float64)", "L.matmul(a, b[0], out=o)"),
    ("o = L.empty((), dtype=L.float64)", "L.matmul(a[0], b[0], out=o)"),
    ("o = L.empty(3, dtype=L.float64)", "L.matmul(a[0, :2], b, out=o)"),
    ("o = L.empty(2, 2, 2)", "L.matmul(L.ones(2, 2, 3), L.ones(2, 3, 2), out=o)"),
    ("o = L.empty(())", "L.sum(a, out=o)"),
    ("o = L.empty(3)", "L.sum(a, 0, out=o)"),
    ("o = L.empty(2, 3)", "L.sum(a, dim=None, out=o)"),
    ("o = L.empty(1, 3)", "L.sum(a, 0, keepdim=True, out=o)"),
    ("o = L.empty(3, dtype=L.float64); a = L.full((3, 3), 0.1)", "L.sum(a, 0, out=o)"),
    ("o = L.empty(3, dtype=L.int64); a = a * 1.5", "L.sum(a, 0, out=o)"),
    ("o = L.empty(3, dtype=L.bool)", "L.sum(i, 0, out=o)"),
    ("o = L.empty(3)", "L.sum(i, 0, out=o)"),
    ("o = L.empty(3, dtype=L.float64)", "L.sum(a, 0, dtype=L.float32, out=o)"),
    ("o = L.empty(3)", "L.sum(w, 0, out=o)"),
    ("o = L.empty(4, 3)", "L.cat([a, b], out=o)"),
    ("o = L.empty(1)", "L.cat([a, b], out=o)"),
    ("o = L.empty(2, 6)", "L.cat((a, b), dim=1, out=o)"),
    ("o = L.empty(4, 3, dtype=L.float64)", "L.cat([a, b], out=o)"),
    ("o = L.empty(4, 3, dtype=L.int64)", "L.cat([a, b], out=o)"),
    ("o = L.empty(4, 3, dtype=L.bool)", "L.cat([i, i], out=o)"),
    ("o = L.empty(4, 3)", "L.cat([i, a], out=o)"),
    ("o = L.empty(4, 3)", "L.cat([w, b], out=o)"),
    ("o = L.empty(4, 3)", "L.cat([a, b], out=3)"),
    ("o = L.empty(2, 2, 3)", "L.stack([a, b], out=o)"),
    ("o = L.empty(7)", "L.stack([a, b], 1, out=o)"),
    ("o = L.empty(2, 2, 3, dtype=L.int64)", "L.stack([a, b], out=o)"),
    ("o = L.empty(2, 2, 3)", "L.stack([w, b], out=o)"),
    ("o = L.empty(2, 3)", "L.zeros(2, 3, out=o)"),
    ("o = L.empty(5)", "L.zeros((2, 3), out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.zeros(2, 3, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.zeros(2, 3, dtype=L.float32, out=o)"),
    ("o = L.empty(2, 3, requires_grad=True)", "L.zeros(2, 3, out=o)"),
    ("o = L.empty(2, 3)", "L.zeros(2, 3, out=o, requires_grad=True)"),
    ("o = L.empty(2, 3)", "L.zeros(2, out=3)"),
    ("o = L.empty(2)", "L.ones(2, 3, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.ones(2, 3, dtype=L.float64, out=o)"),
    ("o = L.empty(2, 3, requires_grad=True)", "L.ones(2, 3, out=o)"),
    ("o = L.empty(2, 3)", "L.full((2, 3), 7, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.full((2, 3), 7.5, out=o)"),
    ("o = L.empty(5)", "L.arange(5, out=o)"),
    ("o = L.empty(5, dtype=L.int64)", "L.arange(5, out=o)"),
    ("o = L.empty(3, dtype=L.int64)", "L.arange(5, out=o)"),
    ("o = L.empty(0, dtype=L.int64)", "L.arange(5, out=o)"),
    ("o = L.empty(2, 3)", "L.arange(5, out=o)"),
    ("o = L.empty(5, dtype=L.int64)", "L.arange(0.5, 5, out=o)"),
    ("o = L.empty(4, dtype=L.float64)", "L.arange(0, 1, 0.1, out=o)"),
    ("o = L.empty(6)", "L.arange(6, out=o.view(2, 3))"),
    ("o = L.empty(5)", "L.arange(5, out=o, dtype=L.int64)"),
    ("o = L.empty(5, requires_grad=True)", "L.arange(5, out=o)"),
    ("o = L.empty(2, 3)", "L.eye(3, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.eye(3, 2, out=o)"),
    ("o = L.empty(2, 3, requires_grad=True)", "L.eye(3, out=o)"),
    ("o = L.empty(2, 3)", "L.linspace(0, 1, 5, out=o)"),
    ("o = L.empty(5, dtype=L.int64)", "L.linspace(0, 1, 5, out=o)"),
    ("o = L.empty(5, dtype=L.int64)", "L.linspace(0, 1, 5, dtype=L.float32, out=o)"),
    ("o = L.empty(2, 3, dtype=L.int64)", "L.empty(2, dtype=L.float32, out=o)"),
    ("o = L.empty(2, 3, requires_grad=True)", "L.empty(2, 3, out=o)"),
    ("o = L.empty(2, 3)", "L.zeros(2, 3, out=o, device='cpu')"),
]


@pytest.mark.parametrize("setup, expr", OUT_CASES, ids=[e for _, e in OUT_CASES])
def test_out_matches_torch(torch, setup, expr):
    ours, theirs = _run_out(tg, setup, expr), _run_out(torch, setup, expr)
    tg.set_grad_enabled(True)
    torch.set_grad_enabled(True)
    if isinstance(theirs[0], type):
        _same_error(ours, theirs)
        return
    assert not isinstance(ours[0], type), ours
    if "empty" not in expr:
        assert ours[0] == theirs[0]
    assert ours[1:4] == theirs[1:4]
    # the same warnings (PyTorch's add where it raised them, and a resize_ hint)
    assert len(ours[4]) == len(theirs[4])
    for mine, their in zip(ours[4], theirs[4]):
        assert their.startswith(mine), (mine, their)


def test_out_writes_in_place_and_bumps_the_version():
    a, b = tg.ones(2, 3), tg.full((2, 3), 0.5)
    o = tg.zeros(2, 3)
    view = o[0]
    version = o._version
    assert tg.add(a, b, out=o) is o
    assert view.tolist() == [1.5, 1.5, 1.5] and o._version > version
    assert tg.cat([a[:1], b[:1]], out=o).tolist() == [[1.0] * 3, [0.5] * 3]
    assert tg.zeros(2, 3, out=o) is o and view.tolist() == [0.0] * 3
    grown = tg.arange(4, out=tg.empty(0, dtype=tg.int64))
    assert grown.tolist() == [0, 1, 2, 3]
    # a resized out is a new block of memory: the old views keep the old one
    with pytest.warns(UserWarning, match=r"had shape \[2, 3\], which does not match the "
                                         r"required output shape \[3\]"):
        tg.sum(a, 0, out=o)
    assert o.shape == (3,) and o.tolist() == [2.0, 2.0, 2.0] and view.shape == (3,)


def test_out_refuses_autograd_and_allows_it_under_no_grad():
    w = tg.ones(2, requires_grad=True)
    o = tg.empty(2)
    with pytest.raises(RuntimeError, match=r"^mul\(\): functions with out=\.\.\. arguments "
                                           r"don't support automatic differentiation"):
        tg.mul(w, 2.0, out=o)
    with tg.no_grad():
        assert tg.mul(w, 2.0, out=o).tolist() == [2.0, 2.0]
    assert not o.requires_grad and o.grad_fn is None
