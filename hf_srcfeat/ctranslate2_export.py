"""Old import path of `hf_srcfeat.integrations.ctranslate2` (the export) and `hf_srcfeat.commands.export_ct2` (its
command), kept so that existing code and `python -m hf_srcfeat.ctranslate2_export` keep working."""

import sys

from .commands.export_ct2 import main
from .integrations.ctranslate2 import *  # noqa: F403

if __name__ == "__main__":
    sys.exit(main())
