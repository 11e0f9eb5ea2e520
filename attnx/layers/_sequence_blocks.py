"""A SequenceModel's whole pass as one compiled call each way: its only path.

attnx.kernels._blocks.BlockStack runs every block's forward (or backward) on pointers
it checked once; attnx.kernels._model_pass.ModelPass runs the stem, the embedding, the
class token, that stack, the final norm, the pooling and the head, for every
configuration. `stack_for` builds both from the operands each stage makes of its own
weights and the buffers (attnx.layers.stages), per signature of a set of buffers (the
blocks' key padding mask, one of the buffers' own arrays, training or inference,
dropout, thread counts, the attention layers' paths) and keeps them on those buffers,
so a training step spends no Python between the kernels. The same stages one kernel
call at a time, the reference this pass is tested against, live in
attnx.testing.reference_pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..kernels import _attnargs
from ..kernels._blocks import BlockStack, StackScratch
from ..kernels._model_pass import ModelPass
from .attention import _Last as _AttentionLast
from .stages import Pooling

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ._sequence_buffers import _Buffers
    from .stages import Stages

    _U8Array = npt.NDArray[np.uint8]


class _Compiled(NamedTuple):
    stack: BlockStack
    lasts: list[_AttentionLast]   # each attention layer's state after a training forward
    whole: ModelPass              # the whole pass


def stack_for(stages: Stages, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
              drop: bool, threads: int, nth: int) -> _Compiled:
    """The compiled pass of the stages over the buffers b (built on first use, then kept
    on b)."""
    t = b.tt
    paths = tuple(blk.attn._path(t, t, grad) for blk in stages.blocks)
    key = (grad, drop, None if km is None else id(km), threads, nth, paths,
           _attnargs.block_sizes() if "blocked" in paths else None)
    got: _Compiled | None = b.stacks.get(key)
    if got is None:
        got = b.stacks[key] = _build(stages, b, km, nb, grad, drop, threads, nth)
    return got


def _build(stages: Stages, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
           drop: bool, threads: int, nth: int) -> _Compiled:
    """The block stack and the whole pass over the buffers b, each stage's operands
    from the stage (a keyword names the buffer each argument points into)."""
    if grad:
        b.for_backward()
    ops = [blk.operands(b, km, nb, grad, drop, threads) for blk in stages.blocks]
    pre = stages.blocks[0].pre
    # the blocks' dL/dH_L: after the final norm's backward (da), else the head's (dhf)
    scratch = (StackScratch(branch=b.branch, dcur=b.da if pre else b.dhf, dbr=b.dbr, db=b.db,
                            dzt=b.dzt, dhid=b.dhid, part=b.part) if grad else
               StackScratch(b.branch, None, None, None, None, None, None))
    stack = BlockStack([o[0] for o in ops], [o[2] for o in ops], [o[3] for o in ops],
                       scratch, pre, drop, grad, nth, threads)
    return _Compiled(stack, [o[1] for o in ops], _whole(stages, b, km, nb, grad, nth, stack))


def _whole(stages: Stages, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
           nth: int, stack: BlockStack) -> ModelPass:
    """The whole pass around `stack`, its ends the stages' operands in order, pointing
    into the buffers b."""
    stem = [st.operands(b, km, grad) for st in stages.stem]
    pos = stages.positions
    table, dpos = (None, None) if pos is None else pos.operands(b.n, grad)
    x = b.ss[-1] if stages.stem else b.x if b.xn is None else b.xn
    embed = stages.embed.operands(b, x, table, dpos, grad)
    cls = None if stages.cls is None else stages.cls.operands(b, grad)
    top = Pooling.end(stages.pool, stages.final_norm, b, grad)
    return ModelPass(stack, nb, km, nth, stem, embed, cls, top, stages.head.operands(b, grad))
