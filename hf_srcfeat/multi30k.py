"""Old import path of `hf_srcfeat.data.multi30k`, kept so that existing code keeps working."""

import sys

from .data import multi30k

sys.modules[__name__] = multi30k
