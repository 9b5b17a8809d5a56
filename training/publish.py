#!/usr/bin/env python
"""`python training/publish.py ...` keeps working: it is the installed command `hf-srcfeat-publish` (`hf_srcfeat.commands.publish`)."""

import sys

from hf_srcfeat.commands.publish import cli

if __name__ == "__main__":
    sys.exit(cli())
