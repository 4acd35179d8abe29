"""Learning-rate schedulers against PyTorch: every scheduler of the registry (several
param groups, momentum cycled where it applies) gives PyTorch's learning rates (and
momenta) step for step over 120+ steps, warns as PyTorch warns, and its state dict has
PyTorch's keys and resumes the same sequence; the closed forms of step(epoch), the
errors, and ReduceLROnPlateau's modes."""
import inspect
import math
import warnings

import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def optimizer(L, name="SGD", **kw):
    ps = [L.nn.Parameter(L.ones(2)), L.nn.Parameter(L.ones(3))]
    return getattr(L.optim, name)([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.5}],
                                  lr=0.1, **kw)


def S(L):
    return L.optim.lr_scheduler


# name: (make(L, opt) -> scheduler, optimizer name, its options, steps)
CASES = {
    "StepLR": (lambda L, o: S(L).StepLR(o, 7, 0.5), "SGD", {}),
    "MultiStepLR": (lambda L, o: S(L).MultiStepLR(o, [3, 10, 10, 40], 0.3), "SGD", {}),
    "ExponentialLR": (lambda L, o: S(L).ExponentialLR(o, 0.97), "SGD", {}),
    "LinearLR": (lambda L, o: S(L).LinearLR(o, 0.2, 0.9, 30), "SGD", {}),
    "ConstantLR": (lambda L, o: S(L).ConstantLR(o, 0.25, 12), "SGD", {}),
    "PolynomialLR": (lambda L, o: S(L).PolynomialLR(o, 60, 2.0), "SGD", {}),
    "CosineAnnealingLR": (lambda L, o: S(L).CosineAnnealingLR(o, 17, 0.01), "SGD", {}),
    "CosineAnnealingWarmRestarts": (
        lambda L, o: S(L).CosineAnnealingWarmRestarts(o, 7, 2, 0.001), "SGD", {}),
    "CosineAnnealingWarmRestarts-1": (
        lambda L, o: S(L).CosineAnnealingWarmRestarts(o, 10), "SGD", {}),
    "CyclicLR-triangular2": (
        lambda L, o: S(L).CyclicLR(o, 0.01, [0.1, 0.2], 9, 5, mode="triangular2"),
        "SGD", {"momentum": 0.9}),
    "CyclicLR-exp_range": (
        lambda L, o: S(L).CyclicLR(o, 0.01, 0.1, 9, mode="exp_range", gamma=0.99),
        "SGD", {"momentum": 0.9}),
    "CyclicLR-scale_fn": (
        lambda L, o: S(L).CyclicLR(o, 0.01, 0.1, 6, scale_fn=lambda x: 0.9 ** x,
                                   scale_mode="iterations", cycle_momentum=False),
        "SGD", {}),
    "CyclicLR-betas": (lambda L, o: S(L).CyclicLR(o, 0.001, 0.01, 5), "Adam", {}),
    "OneCycleLR": (lambda L, o: S(L).OneCycleLR(o, [0.1, 0.3], total_steps=130),
                   "SGD", {"momentum": 0.9}),
    "OneCycleLR-three_phase": (
        lambda L, o: S(L).OneCycleLR(o, 0.1, epochs=13, steps_per_epoch=10, three_phase=True,
                                     anneal_strategy="linear"), "NAdam", {}),
    "MultiplicativeLR": (lambda L, o: S(L).MultiplicativeLR(o, lambda e: 0.99), "SGD", {}),
    "LambdaLR": (lambda L, o: S(L).LambdaLR(o, [lambda e: 0.99 ** e, lambda e: 1 / (e + 1)]),
                 "SGD", {}),
    "SequentialLR": (lambda L, o: S(L).SequentialLR(
        o, [S(L).LinearLR(o, 0.1, total_iters=10), S(L).ExponentialLR(o, 0.9),
            S(L).CosineAnnealingLR(o, 20)], [10, 40]), "SGD", {}),
    "ChainedScheduler": (lambda L, o: S(L).ChainedScheduler(
        [S(L).ConstantLR(o, 0.1, 5), S(L).ExponentialLR(o, 0.95)]), "SGD", {}),
    "Chained-in-Sequential": (lambda L, o: S(L).SequentialLR(
        o, [S(L).ChainedScheduler([S(L).LinearLR(o, 0.5, total_iters=4),
                                   S(L).StepLR(o, 3, 0.8)]),
            S(L).PolynomialLR(o, 50, 0.5)], [20]), "SGD", {}),
}
NAMES = list(CASES)


def record(L, name, n=130, optimizer_first=True):
    """The lrs (and momenta) after construction and after each of n steps, and the
    messages of the warnings given."""
    make, oname, okw = CASES[name]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        o = optimizer(L, oname, **okw)
        s = make(L, o)
        seq = [list(s.get_last_lr())]
        for _ in range(n):
            if optimizer_first:
                o.step()
            s.step()
            seq.append(list(s.get_last_lr()) + [g.get("momentum", g.get("betas"))
                                                for g in o.param_groups])
    return seq, [str(x.message) for x in w], o, s


@pytest.mark.parametrize("name", NAMES)
def test_sequence_and_warnings_match_pytorch(name):
    ours, wo, o, s = record(tg, name)
    theirs, wt, to, ts = record(torch, name)
    assert ours == theirs
    assert wo == wt
    assert [g["lr"] for g in o.param_groups] == [g["lr"] for g in to.param_groups]
    assert len({str(x[:2]) for x in ours}) > 1        # (the lr changed)


@pytest.mark.parametrize("name", ["StepLR", "ExponentialLR", "CosineAnnealingLR"])
def test_stepping_the_scheduler_first_warns_as_pytorch(name):
    ours = record(tg, name, n=3, optimizer_first=False)
    theirs = record(torch, name, n=3, optimizer_first=False)
    assert ours[1] == theirs[1] and any("before `optimizer.step()`" in m for m in ours[1])
    assert ours[0] == theirs[0]


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_keys_and_resuming(name):
    runs = {}
    for L in (tg, torch):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, _, o, s = record(L, name, n=37)
            osd, ssd = o.state_dict(), s.state_dict()
            make, oname, okw = CASES[name]
            o2 = optimizer(L, oname, **okw)
            s2 = make(L, o2)
            o2.load_state_dict(osd)
            s2.load_state_dict(ssd)
            seq = []
            for _ in range(60):
                o.step()
                o2.step()
                s.step()
                s2.step()
                assert s2.get_last_lr() == s.get_last_lr()
                seq.append(s2.get_last_lr())
        runs[L] = (sorted(ssd), seq)
    assert runs[tg] == runs[torch]


def test_closed_forms_of_step_epoch():
    for name, make in (("StepLR", lambda L, o: S(L).StepLR(o, 3, 0.5)),
                       ("MultiStepLR", lambda L, o: S(L).MultiStepLR(o, [2, 5, 5], 0.5)),
                       ("ExponentialLR", lambda L, o: S(L).ExponentialLR(o, 0.9)),
                       ("LinearLR", lambda L, o: S(L).LinearLR(o, 0.25, 1.0, 8)),
                       ("ConstantLR", lambda L, o: S(L).ConstantLR(o, 0.5, 4)),
                       ("PolynomialLR", lambda L, o: S(L).PolynomialLR(o, 9, 3.0)),
                       ("CosineAnnealingLR", lambda L, o: S(L).CosineAnnealingLR(o, 7, 0.01)),
                       ("LambdaLR", lambda L, o: S(L).LambdaLR(o, lambda e: 1 / (1 + e))),
                       ("CosineAnnealingWarmRestarts",
                        lambda L, o: S(L).CosineAnnealingWarmRestarts(o, 3, 2))):
        out = []
        for L in (tg, torch):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                o = optimizer(L)
                s = make(L, o)
                lrs = []
                for epoch in (4, 2, 9, 0, 13, 1.5, 6.25):
                    o.step()
                    s.step(epoch)
                    lrs.append(s.get_last_lr())
            out.append((lrs, [str(x.message)[:40] for x in w]))
        assert out[0] == out[1], name


PLATEAU = [dict(patience=2, cooldown=1, factor=0.5, min_lr=[0.001, 0.01]),
           dict(mode="max", threshold_mode="abs", threshold=0.05, patience=0),
           dict(threshold_mode="abs", eps=0.02, factor=0.9, patience=1),
           dict(mode="max", patience=3, cooldown=4)]


@pytest.mark.parametrize("kw", PLATEAU, ids=[str(i) for i in range(len(PLATEAU))])
def test_reduce_lr_on_plateau_matches_pytorch(kw):
    metrics = [math.sin(i / 3.0) + 0.01 * (i % 5) - 0.002 * i for i in range(120)]
    out = []
    for L in (tg, torch):
        o = optimizer(L)
        s = S(L).ReduceLROnPlateau(o, **kw)
        seq = []
        for m in metrics:
            o.step()
            s.step(L.tensor(m) if len(seq) % 2 else m)
            seq.append((s.get_last_lr(), s.num_bad_epochs, s.cooldown_counter, s.best))
        sd = s.state_dict()
        s2 = S(L).ReduceLROnPlateau(o, **kw)
        s2.load_state_dict(sd)
        assert s2.state_dict() == sd
        out.append((seq, sorted(sd)))
    assert out[0] == out[1]
    assert len({str(x[0]) for x in out[0][0]}) > 1


ERRORS = [
    lambda L, o: S(L).ConstantLR(o, factor=1.5),
    lambda L, o: S(L).LinearLR(o, start_factor=0),
    lambda L, o: S(L).LinearLR(o, end_factor=2),
    lambda L, o: S(L).LambdaLR(o, [lambda e: 1.0]),
    lambda L, o: S(L).MultiplicativeLR(o, [1.0, 2.0]),
    lambda L, o: S(L).CosineAnnealingWarmRestarts(o, 0),
    lambda L, o: S(L).CosineAnnealingWarmRestarts(o, 2, T_mult=0),
    lambda L, o: S(L).CosineAnnealingWarmRestarts(o, 2, eta_min="0"),
    lambda L, o: S(L).CyclicLR(o, 0.1, 1.0, mode="sawtooth"),
    lambda L, o: S(L).CyclicLR(o, [0.1], 1.0),
    lambda L, o: S(L).OneCycleLR(o, 0.1),
    lambda L, o: S(L).OneCycleLR(o, 0.1, total_steps=0),
    lambda L, o: S(L).OneCycleLR(o, 0.1, epochs=2, steps_per_epoch=0),
    lambda L, o: S(L).OneCycleLR(o, 0.1, total_steps=5, pct_start=1),
    lambda L, o: S(L).OneCycleLR(o, 0.1, total_steps=5, anneal_strategy="exp"),
    lambda L, o: S(L).ReduceLROnPlateau(o, factor=1.0),
    lambda L, o: S(L).ReduceLROnPlateau(o, mode="avg"),
    lambda L, o: S(L).ReduceLROnPlateau(o, threshold_mode="pct"),
    lambda L, o: S(L).ReduceLROnPlateau(o, min_lr=[0.1]),
    lambda L, o: S(L).SequentialLR(o, [], []),
    lambda L, o: S(L).SequentialLR(o, [S(L).StepLR(o, 2)], [3]),
    lambda L, o: S(L).SequentialLR(o, [S(L).StepLR(o, 2), S(L).ReduceLROnPlateau(o)], [3]),
    lambda L, o: S(L).ChainedScheduler([]),
    lambda L, o: S(L).StepLR(o, 2, last_epoch=3),
    lambda L, o: S(L).StepLR(object(), 2),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors_match_pytorch(i):
    out = []
    for L in (tg, torch):
        o = optimizer(L)
        with pytest.raises(Exception) as e:
            ERRORS[i](L, o)
        out.append((type(e.value).__name__, str(e.value).replace("torch", "tapegrad")))
    assert out[0] == out[1]


def test_onecycle_past_its_total_steps_and_plateau_new_groups_raise_as_pytorch():
    out = []
    for L in (tg, torch):
        o = optimizer(L)
        s = S(L).OneCycleLR(o, 0.1, total_steps=3)
        for _ in range(3):
            o.step()
            s.step()
        with pytest.raises(ValueError) as e:
            s.step()
        p = S(L).ReduceLROnPlateau(o, min_lr=[0.0, 0.0], patience=0)
        o.add_param_group({"params": [L.nn.Parameter(L.ones(1))]})
        p.step(1.0)
        with pytest.raises(RuntimeError) as e2:
            p.step(2.0)
        out.append((str(e.value), str(e2.value)))
    assert out[0] == out[1]


def test_get_lr_outside_step_warns():
    for L in (tg, torch):
        s = S(L).StepLR(optimizer(L), 2)
        with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
            s.get_lr()


SCHEDULERS = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
              "ConstantLR", "LinearLR", "ExponentialLR", "SequentialLR", "PolynomialLR",
              "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
              "CosineAnnealingWarmRestarts", "OneCycleLR"]


@pytest.mark.parametrize("name", SCHEDULERS)
def test_signatures_equal_pytorchs(name):
    def sig(f):
        return [(p.name, p.kind, repr(p.default)) for p in inspect.signature(f).parameters.values()]
    ours, theirs = getattr(S(tg), name), getattr(S(torch), name)
    assert sig(ours.__init__) == sig(theirs.__init__)
    assert sig(ours.step) == sig(theirs.step)
