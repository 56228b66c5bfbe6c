"""The probes' values (``eval/process/probe_values.py``) in this process: weights re-drawn as the
models are built reach a candidate whatever it names, reshapes or folds them into; inputs move
out of the generator's range and stay valid."""

from __future__ import annotations

import torch
import torch.nn as nn

from cudal1.eval.process.probe_values import reinitialised, shifted


class Reference(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.bn = nn.BatchNorm1d(8).eval()
        self.gate = nn.Parameter(torch.zeros(1))
        self.scale = nn.Parameter(torch.randn(8))  # the model's own random weight: seeded as usual
        self.register_buffer("mask", torch.tril(torch.ones(8, 8)))  # structure, not state

    def forward(self, x):
        y = self.bn(self.norm(self.lin(x) @ self.mask)) * self.scale
        return x + self.gate * y


class Candidate(nn.Module):
    """The same function: the Linear's weight stored transposed, the norm's affine and the
    BatchNorm folded into one scale and shift, the gate 0-d, every name different."""

    def __init__(self) -> None:
        super().__init__()
        lin, norm, bn = nn.Linear(8, 8), nn.LayerNorm(8), nn.BatchNorm1d(8)
        self.alpha = nn.Parameter(torch.zeros(()))
        self.s = nn.Parameter(torch.randn(8))
        self.register_buffer("m", torch.tril(torch.ones(8, 8)))
        with torch.no_grad():
            self.w_t = nn.Parameter(lin.weight.t().contiguous())
            self.b = nn.Parameter(lin.bias.clone())
            k = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            self.mul = nn.Parameter(norm.weight * k)
            self.add = nn.Parameter((norm.bias - bn.running_mean) * k + bn.bias)

    def forward(self, x):
        h = torch.addmm(self.b, x, self.w_t) @ self.m
        h = torch.nn.functional.layer_norm(h, (8,)) * self.mul + self.add
        return x + self.alpha * (h * self.s)


def _build(cls: type[nn.Module], reinit: int | None) -> tuple[nn.Module, list]:
    torch.manual_seed(0)
    if reinit is None:
        return cls(), []
    with reinitialised(reinit) as redraws:
        model = cls()
        redraws.model_done(model)
    return model, redraws.keys


def test_redrawn_weights_reach_a_candidate_that_renames_reshapes_and_folds_them():
    x = torch.randn(4, 8)
    constructor = nn.Linear.__dict__["__init__"]
    ref0, _ = _build(Reference, None)
    cand0, _ = _build(Candidate, None)
    assert torch.allclose(ref0(x), cand0(x), atol=1e-5)  # the same function at initialisation
    ref, ref_keys = _build(Reference, 7)
    cand, cand_keys = _build(Candidate, 7)
    assert not torch.allclose(ref(x), ref0(x), atol=1e-3)  # the gate opened, the norms moved
    assert torch.allclose(ref(x), cand(x), atol=1e-5)
    assert {tuple(k[1:]) for k in ref_keys} == {tuple(k[1:]) for k in cand_keys}
    assert bool((ref.bn.running_var > 0).all()) and ref.bn.num_batches_tracked.item() == 0
    assert torch.equal(ref.mask, torch.tril(torch.ones(8, 8)))  # the model's own buffers stay
    assert torch.equal(ref.scale, ref0.scale)  # and so do its own random parameters
    assert nn.Linear.__dict__["__init__"] is constructor  # the constructors are restored


def test_a_candidate_without_the_tensor_gets_no_values_for_it():
    """The gate is re-drawn in the reference; a candidate without one has no counterpart."""

    class NoGate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

    _, ref_keys = _build(Reference, 3)
    _, cand_keys = _build(NoGate, 3)
    missing = {tuple(k[1:]) for k in ref_keys} - {tuple(k[1:]) for k in cand_keys}
    assert (1, "0.0", 0) in missing


def test_shifted_inputs_leave_the_generator_range_and_stay_valid():
    x = torch.randn(1000)
    moved = shifted(x)
    assert float(moved.abs().max()) > 4 * float(x.abs().max()) and moved.dtype == x.dtype
    positive = torch.rand(1000)
    assert float(shifted(positive).min()) > 0
    labels = torch.randint(0, 2, (100,)).float()
    assert torch.equal(shifted(labels), labels)  # integer-valued: structure
    index = torch.arange(10)
    assert shifted(index) is index and shifted(3.0) == 3.0


class LayerScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((8,), 1e-6))  # ConvNeXt's layer scale
        self.negative = nn.Parameter(torch.full((8,), -1e-5))
        self.var = nn.Parameter(torch.full((8,), 4.0))


def test_a_tiny_constant_is_redrawn_at_unit_scale_and_keeps_its_sign():
    """Kept at its own scale, a 1e-6 layer scale stayed near 1e-6 and a candidate that dropped
    its branch passed the probe (audit/cases/layer_scale_branch_dropped.py)."""
    model, _ = _build(LayerScale, reinit=3)
    model.requires_grad_(False)
    assert float(model.gamma.min()) > 0.1 and float(model.negative.max()) < -0.1
    assert float(model.var.min()) > 0.4 and not torch.allclose(model.var, torch.full((8,), 4.0))


class OwnScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.alpha = nn.Parameter(torch.ones(8))  # the model's own constant parameter

    def forward(self, x):
        return self.lin(x) * self.alpha


class OwnScaleFolded(nn.Module):
    """Folds its own scale into the linear layer once, in ``__init__``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.alpha = nn.Parameter(torch.ones(8))
        with torch.no_grad():
            self.register_buffer("w", self.alpha[:, None] * self.lin.weight)
            self.register_buffer("b", self.alpha * self.lin.bias)

    def forward(self, x):
        return torch.addmm(self.b, x, self.w.t())


def test_a_models_own_constant_parameter_is_redrawn_as_it_is_made_so_init_folds_it():
    """Re-drawn only once the model was built, the fold carried alpha = 1 while the reference
    read the new alpha (audit/cases/legit_fold_own_scale_in_init.py, rejected)."""
    x = torch.randn(4, 8)
    ref, ref_keys = _build(OwnScale, reinit=5)
    cand, cand_keys = _build(OwnScaleFolded, reinit=5)
    with torch.no_grad():
        assert not torch.allclose(ref.alpha, torch.ones(8))
        assert torch.allclose(ref(x), cand(x), atol=1e-6)
    assert [k[1:] for k in ref_keys] == [k[1:] for k in cand_keys]
