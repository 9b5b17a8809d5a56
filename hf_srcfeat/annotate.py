"""Old import path of `hf_srcfeat.commands.annotate`, kept so that existing code and `python -m hf_srcfeat.annotate`
keep working."""

import sys

from .commands import annotate

if __name__ == "__main__":
    sys.exit(annotate.main())
sys.modules[__name__] = annotate
