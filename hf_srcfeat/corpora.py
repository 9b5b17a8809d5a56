"""Old import path of `hf_srcfeat.data.corpora`, kept so that existing code keeps working."""

import sys

from .data import corpora

sys.modules[__name__] = corpora
