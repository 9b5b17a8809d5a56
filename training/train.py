#!/usr/bin/env python
"""`python training/train.py ...` keeps working: it is the installed command `hf-srcfeat-train` (`hf_srcfeat.commands.train`)."""

import sys

from hf_srcfeat.commands.train import cli

if __name__ == "__main__":
    sys.exit(cli())
