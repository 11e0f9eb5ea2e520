"""Type stubs for the fused small-head attention kernels (attnx/kernels/_flash.pyx): the
entry points of attnx/kernels/_attention.pyi, with its arguments, for shapes of path "fused"."""
from ._attention import attention_backward as attention_backward
from ._attention import attention_forward as attention_forward

def dispatch_state() -> tuple[int, int]: ...
