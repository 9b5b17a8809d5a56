"""Old import path of `hf_srcfeat.metrics.evaluation`, kept so that existing code keeps working."""

import sys

from .metrics import evaluation

sys.modules[__name__] = evaluation
