"""attnx.layers._model_plan: a SequenceModel's stages in order, the one description the
compiled whole pass and the ONNX export walk."""
import numpy as np
import pytest

from attnx import SequenceModel
from attnx.layers._model_plan import KINDS, model_plan, stages

CONFIGS = [dict(),
           dict(pooling="mean", positional="sinusoidal"),
           dict(pooling="cls", norm="pre", positional="learned", max_len=20,
                stem=((5, 2), (3, 1)), instance_norm="revin", instance_affine=True),
           dict(pooling="max", stem=((3, 1),), instance_norm="input", bias=False),
           dict(pooling="last", positional="rope", norm="pre")]


def test_the_stages_of_a_full_model_in_order():
    m = SequenceModel(3, 8, 2, 2, 3, **CONFIGS[2], random_state=0)
    assert [s.kind for s in m.plan] == [
        "instance_norm", "stem", "stem", "embed", "positions", "cls", "block", "block",
        "final_norm", "pool", "head", "denorm"]
    stem = stages(m.plan, "stem")
    assert [(s.kernel, s.stride, s.pad_left, s.pad_right) for s in stem] == [
        (w.patch_len, w.stride, w.pad_left, w.pad_right) for w in m._windows]
    assert [s.how for s in m.plan if s.kind in ("positions", "pool", "instance_norm")] == [
        "revin", "learned", "cls"]
    assert all(s.how == "pre" for s in stages(m.plan, "block"))


@pytest.mark.parametrize("kw", CONFIGS)
def test_the_widths_chain_and_every_weight_has_its_stage(kw):
    m = SequenceModel(3, 8, 2, 2, 3, **kw, random_state=0)
    assert m.plan == model_plan(m.get_config())
    for a, b in zip(m.plan, m.plan[1:]):
        assert a.width_out == b.width_in, (a, b)
    assert m.plan[0].width_in == 3 and m.plan[-1].width_out == 3
    prefixes = [s.prefix for s in m.plan if s.prefix]
    for name in m.params:
        assert any(name.startswith(p) for p in prefixes), name
    # and every stage with weights has some
    for p in prefixes:
        assert any(name.startswith(p) for name in m.params), p
    assert {s.kind for s in m.plan} <= set(KINDS)
    assert ("rope" == kw.get("positional")) == (not stages(m.plan, "positions")
                                                and kw.get("positional") is not None)


def test_stages_names_its_kind():
    with pytest.raises(ValueError, match="kind must be one of"):
        stages(model_plan(SequenceModel(3, 8, 2, 1, 2).get_config()), "blocks")
