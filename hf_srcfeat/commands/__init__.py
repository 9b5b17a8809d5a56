"""The installed commands (`hf-srcfeat-train`, `hf-srcfeat-annotate`, `hf-srcfeat-translate`, `hf-srcfeat-export-ct2`,
`hf-srcfeat-publish`, `hf-srcfeat-pretrain-dae`, `hf-srcfeat-average-checkpoints`, `hf-srcfeat-score`): each
module's `main(argv)` is one command."""

from __future__ import annotations

import sys
from collections.abc import Callable


def run_as_script(main: Callable[[list[str] | None], object]) -> int:
    """Run a command whose `main` returns a result for Python callers (a metrics dict, a folder) as a console
    script: the result is not the exit status (`sys.exit(dict)` would print it and exit 1); errors still exit
    through `SystemExit`."""
    main(sys.argv[1:])
    return 0
