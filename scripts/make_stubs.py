"""Write tapegrad/_front/tensor.pyi: the Tensor class as editors and type checkers should
see it, with the methods the front's modules register (_front/methods.py) as well as those
in the class body. Run it after adding or renaming a method:

    python scripts/make_stubs.py

tests/api/test_stubs.py fails while the committed stub differs from what this writes.
"""
import inspect
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STUB = os.path.join(HERE, os.pardir, "tapegrad", "_front", "tensor.pyi")

HEADER = '''"""Type stub of tapegrad._front.tensor, written by scripts/make_stubs.py (do not edit):
Tensor with every method, including those the front's modules register at import."""
from typing import Any

def __getattr__(name: str) -> Any: ...

'''


def _parameters(fn, drop_first):
    """fn's parameters as stub text: names, kinds and `= ...` for defaults."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "self, *args: Any, **kwargs: Any"
    out, star_done = [], False
    params = list(sig.parameters.values())
    if drop_first and params and params[0].kind in (params[0].POSITIONAL_ONLY,
                                                    params[0].POSITIONAL_OR_KEYWORD):
        params = params[1:]
    out.append("self")
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            out.append(f"*{p.name}")
            star_done = True
            continue
        if p.kind is p.VAR_KEYWORD:
            out.append(f"**{p.name}")
            continue
        if p.kind is p.KEYWORD_ONLY and not star_done:
            out.append("*")
            star_done = True
        out.append(p.name + ("=..." if p.default is not p.empty else ""))
    return ", ".join(out)


def _member(name, value):
    if isinstance(value, property):
        lines = ["    @property", f"    def {name}(self) -> Any: ..."]
        if value.fset is not None:
            lines += [f"    @{name}.setter", f"    def {name}(self, value: Any) -> None: ..."]
        return lines
    if isinstance(value, staticmethod):
        return ["    @staticmethod", f"    def {name}(*args: Any, **kwargs: Any) -> Any: ..."]
    if isinstance(value, classmethod):
        return ["    @classmethod", f"    def {name}(cls, *args: Any, **kwargs: Any) -> Any: ..."]
    if callable(value):
        return [f"    def {name}({_parameters(value, drop_first=True)}) -> Any: ..."]
    return [f"    {name}: Any"]


def stub_text():
    import tapegrad
    from tapegrad._front.methods import METHODS
    from tapegrad._front.tensor import Tensor, Size
    members = {}
    for name, value in vars(Tensor).items():
        if name in ("__slots__", "__doc__", "__module__", "__dict__", "__weakref__",
                    "_i", "_shape", "_gw") or name.startswith("_abc"):
            continue
        members[name] = value
    members.update(METHODS)
    assert tapegrad.Tensor is Tensor
    lines = [HEADER, f"class Size(tuple[int, ...]):",
             "    def numel(self) -> int: ...", "", "",
             "class Tensor:"]
    for name in sorted(members):
        lines += _member(name, members[name])
    return "\n".join(lines) + "\n"


def main():
    text = stub_text()
    with open(STUB, "w") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(STUB)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
