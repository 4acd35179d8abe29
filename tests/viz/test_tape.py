"""tapegrad.viz.tape: the live rows of the tape as text."""
import tapegrad
from tapegrad import viz


def test_rows_inputs_saved_and_the_rows_a_backward_visits():
    a = tapegrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    u0, u1, u2 = (a * 2).unbind(0)
    e = (u0 * u2 + u1).exp()
    e.retain_grad()
    other = a.exp()
    other.add_(1)       # its saved result is now stale
    text = viz.tape(e)
    head, columns, *rows = text.splitlines()
    assert columns.split() == ["row", "op", "inputs", "outputs", "saved", "backward"]
    by_op = {}
    for line in rows:
        by_op.setdefault(line.split()[1], []).append(line)
    assert len(by_op["UnbindBackward0"]) == 1
    unbind = by_op["UnbindBackward0"][0]
    assert "3x() float32" in unbind and unbind.endswith("visit")
    unbind_row = unbind.split()[0]
    mul2 = [line for line in by_op["MulBackward0"] if f"row {unbind_row}.0@v0" in line]
    assert len(mul2) == 1 and f"row {unbind_row}.2@v0" in mul2[0]
    assert "self=t" in mul2[0] and "other=t" in mul2[0]
    add = by_op["AddBackward0"]
    assert any(f"row {unbind_row}.1" in line and line.endswith("visit") for line in add)
    exps = by_op["ExpBackward0"]
    assert sum(line.endswith("visit") for line in exps) == 1
    assert any(f"t{e._i}[0]*" in line for line in exps)     # retains its gradient
    stale = [line for line in exps if "STALE" in line]
    assert len(stale) == 1 and "v0->v1" in stale[0] and "leaf t" in stale[0]
    assert not stale[0].endswith("visit")
    visits = sum(line.endswith("visit") for line in rows)
    assert head.endswith(f"a backward from tensor {e._i} visits {visits}")
    assert visits == 5


def test_without_a_tensor_and_after_backward():
    x = tapegrad.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    text = viz.tape()
    assert text.startswith("tape: ") and "backward" not in text.splitlines()[1]
    y.backward()
    # the rows the backward freed are gone, or listed with their saved values freed
    after = viz.tape()
    assert all("freed" in line for line in after.splitlines()[2:] if "MulBackward0" in line
               and "self=" in line)


def test_a_leaf_has_no_backward():
    x = tapegrad.tensor([1.0], requires_grad=True)
    assert "visits none" in viz.tape(x).splitlines()[0]
