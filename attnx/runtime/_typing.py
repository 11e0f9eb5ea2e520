"""Type aliases shared by attnx's annotations.

Only the annotations use these names; importing the module costs one numpy.typing import.
"""
from __future__ import annotations

from typing import Any, Union

import numpy as np
import numpy.typing as npt

#: A float32 or float64 array (layers and models run in either).
FloatArray = npt.NDArray[np.floating[Any]]
#: A boolean array, e.g. a key padding mask (B, T), True = padding.
BoolArray = npt.NDArray[np.bool_]
#: An integer array, e.g. class indices or a permutation.
IntArray = npt.NDArray[np.integer[Any]]
#: Any array of any dtype (labels, user input before validation).
AnyArray = npt.NDArray[Any]
#: What ``random_state`` accepts: a seed, a legacy RandomState or a Generator.
RandomStateLike = Union[None, int, np.integer[Any], np.random.RandomState, np.random.Generator]
