"""Defects found in review, each pinned by a test: read-only parameter mappings and
finite checks made after the conversion to the layer's dtype."""
import numpy as np
import pytest

import attnx


@pytest.mark.parametrize("make", [
    lambda: attnx.MultiHeadAttention(8, 2, bias=True, random_state=0),
    lambda: attnx.Transformer(8, 2, n_layers=2, random_state=0),
])
def test_params_is_a_read_only_mapping_of_live_views(make):
    model = make()
    for mapping in (model.params, model.grads):
        names = list(mapping)
        first = names[0]
        with pytest.raises(TypeError):
            mapping[first] = np.zeros_like(mapping[first])
        with pytest.raises(TypeError):
            del mapping[first]
        for method in ("update", "pop", "popitem", "setdefault", "clear"):
            assert not hasattr(mapping, method), method
        with pytest.raises(AttributeError):
            mapping.other = 1        # no new attributes either (slots)
        assert list(mapping) == names and len(mapping) == len(names)
        for name in names:            # every name is still a view of the one flat buffer
            assert np.shares_memory(mapping[name], mapping.flat), name
    # writing through a view changes the model (it is live), and AdamW accepts it
    w = model.params[first_weight(model)]
    w[...] = 0.5
    assert np.count_nonzero(model.params.flat == 0.5) == w.size
    attnx.AdamW(model.params)


def first_weight(model):
    return next(iter(model.params))


BIG = 1e39  # finite in float64, infinite in float32


@pytest.mark.parametrize("cls", [attnx.MultiHeadAttention, attnx.Transformer])
def test_values_that_overflow_the_layer_dtype_are_refused(cls):
    layer = cls(8, 2, random_state=0)            # float32
    x = np.random.default_rng(0).normal(size=(2, 5, 8))   # float64 input
    x[1, 2, 3] = BIG
    with pytest.raises(ValueError, match=r"x holds values too large for float32"):
        layer.forward(x)
    with pytest.raises(RuntimeError, match="backward needs a forward"):
        layer.backward(np.zeros((2, 5, 8)))      # the failed forward left nothing to back
    x[1, 2, 3] = 0
    ctx = np.zeros((2, 4, 8))
    ctx[0, 0, 0] = -BIG
    with pytest.raises(ValueError, match=r"context holds values too large for float32"):
        layer.forward(x, context=ctx)
    layer.forward(x)
    dy = np.zeros((2, 5, 8))
    dy[0, 0, 0] = BIG
    with pytest.raises(ValueError, match=r"dy holds values too large for float32"):
        layer.backward(dy)
    # the same values in a float64 layer are fine
    cls(8, 2, random_state=0, dtype=np.float64).forward(x * 0 + BIG / 1e30)


def test_mse_target_that_overflows_is_refused():
    y = np.zeros((2, 3), dtype=np.float32)
    t = np.zeros((2, 3))
    t[1, 1] = BIG
    with pytest.raises(ValueError, match="y_true holds values too large for float32"):
        attnx.mse_loss(y, t)
