"""attnx.layers.stages: a SequenceModel as a list of stages, each owning its parameters
(declared once, laid end to end in the flat buffer), its buffers and its operands."""
import math

import numpy as np
import pytest

from attnx import SequenceModel
from attnx.layers import stages as st

CONFIGS = [dict(),
           dict(pooling="mean", positional="sinusoidal"),
           dict(pooling="cls", norm="pre", positional="learned", max_len=20,
                stem=((5, 2), (3, 1)), instance_norm="revin", instance_affine=True),
           dict(pooling="max", stem=((3, 1),), instance_norm="input", bias=False),
           dict(pooling="last", positional="rope", norm="pre", dropout=0.1)]


def test_the_stages_of_a_full_model_in_order():
    m = SequenceModel(3, 8, 2, 2, 3, **CONFIGS[2], random_state=0)
    assert [type(s).__name__ for s in m.stages] == [
        "InstanceNorm", "StemLayer", "StemLayer", "Embedding", "Positions", "ClassToken",
        "Block", "Block", "FinalNorm", "Pooling", "Head"]
    assert [(s.kernel, s.stride, s.pad_left, s.pad_right) for s in m.stages.stem] == [
        (5, 2, 2, 2), (3, 1, 1, 1)]
    assert [w.patch_len for w in (s.windows for s in m.stages.stem)] == [5, 3]
    assert (m.stages.instance_norm.mode, m.stages.positions.how, m.stages.pool.how) == (
        "revin", "learned", "cls")
    assert all(b.pre for b in m.stages.blocks) and len(m.stages) == 11
    assert "Block('layers.1.', 8 -> 8, d_hidden=32, pre-norm)" in repr(m.stages)
    assert [s.attn for s in m.stages.blocks] == m.attn


@pytest.mark.parametrize("kw", CONFIGS)
def test_the_widths_chain_and_every_weight_belongs_to_one_stage(kw):
    m = SequenceModel(3, 8, 2, 2, 3, **kw, random_state=0)
    stages = list(m.stages)
    for a, b in zip(stages, stages[1:]):
        assert a.width_out == b.width_in, (a, b)
    assert stages[0].width_in == 3 and stages[-1].width_out == 3
    owner = {s.prefix + n: s for s in stages for n in s.names()}
    assert list(owner) == list(m.params)             # the stages' names, in order
    for name, s in owner.items():   # each stage's views are the model's
        assert s.w[name[len(s.prefix):]] is m.params[name]
        assert s.g[name[len(s.prefix):]] is m.grads[name]
    assert ("rope" == kw.get("positional")) == (m.stages.positions is None
                                                and kw.get("positional") is not None)


@pytest.mark.parametrize("kw", CONFIGS)
def test_the_layout_is_the_stages_tables_end_to_end(kw):
    m = SequenceModel(3, 8, 2, 2, 3, **kw, random_state=0)
    layout = m.param_layout(m.get_config())
    assert layout == [(s.prefix + p.name, p.shape) for s in m.stages for p in s.params()]
    at = 0
    flat = m.params.flat
    for name, shape in layout:   # each weight's view starts where the table says
        size = math.prod(shape)
        if not name.endswith(".attn"):
            assert np.shares_memory(m.params[name], flat[at:at + size])
            assert m.params[name].size == size
        at += size
    assert at == flat.size == m.n_params


def test_draws_follow_the_draw_order_not_the_layout():
    """The stem and the class token draw after the others: adding them leaves every
    other weight's initial value as it was."""
    # n_features = d_model: the embedding has the same shape with the stem and without
    plain = SequenceModel(8, 8, 2, 2, 3, pooling="mean", positional="learned", max_len=9,
                          random_state=4)
    more = SequenceModel(8, 8, 2, 2, 3, pooling="cls", positional="learned", max_len=9,
                         stem=((3, 1),), random_state=4)
    assert set(more.params) - set(plain.params) == {"stem.0.W", "stem.0.b", "cls"}
    for name, w in plain.params.items():
        np.testing.assert_array_equal(more.params[name], w, err_msg=name)
    assert st.DRAW_ORDER.index(st.StemLayer) > st.DRAW_ORDER.index(st.Head)
    assert set(st.DRAW_ORDER) == {c for c in vars(st).values()
                                  if isinstance(c, type) and issubclass(c, st.Stage)
                                  and c is not st.Stage}


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("store", [False, True])
def test_the_buffers_are_the_stages_size_table(kw, store):
    m = SequenceModel(3, 8, 2, 3, 3, **kw, random_state=0)
    drop = m.dropout > 0
    geo = m.stages.geometry(2, 9, store, 1, drop)
    tab = m.stages.buffer_table(geo)
    b = m.stages.make_buffers(2, 9, store, 1, drop).for_backward()
    assert len(tab.forward["hs"]) == (4 if store else 2)
    assert len(set(map(id, b.hs))) == len(tab.forward["hs"])
    assert b.zt[0].shape == (2 * geo.tt, 8)
    assert len(set(map(id, b.zt))) == (3 if store else 1)   # inference shares one set
    for name in ("dhf", "da", "dy"):
        assert getattr(b, name).shape == tab.backward[name][0]
    floats = sum(math.prod(s) for t in ((tab.forward, tab.backward) if store
                                        else (tab.forward,))
                 for v in t.values() for s in v)
    assert b.nbytes == floats * m.dtype.itemsize
    assert m.stages.buffer_elements(2, 9, store, 1, drop) == floats


def test_a_stage_declares_each_parameter_once():
    for kw in CONFIGS:
        for s in SequenceModel(3, 8, 2, 2, 3, **kw, random_state=0).stages:
            names = [p.name for p in s.params()]
            assert len(names) == len(set(names)), s
