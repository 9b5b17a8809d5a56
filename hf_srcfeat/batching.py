"""Old import path of `hf_srcfeat.data.batching`, kept so that existing code keeps working."""

import sys

from .data import batching

sys.modules[__name__] = batching
