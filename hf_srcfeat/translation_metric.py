"""Old import path of `hf_srcfeat.metrics.translation_metric`, kept so that existing code keeps working."""

import sys

from .metrics import translation_metric

sys.modules[__name__] = translation_metric
