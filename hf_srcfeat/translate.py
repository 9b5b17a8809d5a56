"""Old import path of `hf_srcfeat.commands.translate`, kept so that existing code and `python -m hf_srcfeat.translate`
keep working."""

import sys

from .commands import translate

if __name__ == "__main__":
    sys.exit(translate.main())
sys.modules[__name__] = translate
