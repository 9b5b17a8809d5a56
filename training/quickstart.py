#!/usr/bin/env python
"""`python training/quickstart.py ...` keeps working: the quickstart is `examples/quickstart.py` (`bash run.sh
quickstart`)."""

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"), run_name="__main__")
