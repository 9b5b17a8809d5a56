"""Old import path of `hf_srcfeat.data.user_factors`, kept so that existing code keeps working."""

import sys

from .data import user_factors

sys.modules[__name__] = user_factors
