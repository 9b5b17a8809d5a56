#!/usr/bin/env python
"""`python training/train.py ...` keeps working: it is the installed command `hf-srcfeat-train` (the same entry point, `--help` included)."""

import sys

from hf_srcfeat.commands.console_scripts import train

if __name__ == "__main__":
    sys.exit(train())
