#!/usr/bin/env python
"""`python training/pretrain_dae.py ...` keeps working: it is the installed command `hf-srcfeat-pretrain-dae` (`hf_srcfeat.commands.pretrain_dae`)."""

import sys

from hf_srcfeat.commands.pretrain_dae import cli

if __name__ == "__main__":
    sys.exit(cli())
