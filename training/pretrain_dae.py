#!/usr/bin/env python
"""`python training/pretrain_dae.py ...` keeps working: it is the installed command `hf-srcfeat-pretrain-dae` (the same entry point, `--help` included)."""

import sys

from hf_srcfeat.commands.console_scripts import pretrain_dae

if __name__ == "__main__":
    sys.exit(pretrain_dae())
