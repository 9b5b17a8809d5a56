"""Which code produced a result, and on which processor: what every results file, card and benchmark JSON records."""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
from pathlib import Path


@functools.cache
def code_version() -> str:
    """Git commit of the code this process runs, taken at the first call (a long benchmark worker keeps the
    code it imported even when the checkout moves on), with '+dirty' when the library, the benchmarks (their results
    aside), the examples, the training scripts or pyproject.toml had uncommitted changes or new files;
    $HF_SRCFEAT_CODE_VERSION where set, else 'unknown', outside a git checkout of hf_srcfeat (a copy inside
    another repository is not that repository's commit)."""
    if os.environ.get("HF_SRCFEAT_CODE_VERSION"):  # a copy of a commit without its git folder (e.g. a GPU machine)
        return os.environ["HF_SRCFEAT_CODE_VERSION"]
    here = Path(__file__).resolve().parent
    # --no-optional-locks: reading the version never rewrites the checkout's index
    git = ["git", "--no-optional-locks"]
    try:
        top = subprocess.run([*git, "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True,
                             check=True).stdout.strip()
        if Path(top).resolve() != here.parent:
            return "unknown"
        commit = subprocess.run([*git, "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                                check=True).stdout.strip()
        # Result files written by the measurement scripts themselves do not make the code dirty.
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=normal", "--", ":(top)hf_srcfeat",
                                ":(top)benchmarks", ":(top)examples", ":(top)training", ":(top)pyproject.toml",
                                ":(exclude,top)benchmarks/results"],
                               cwd=here, capture_output=True, text=True, check=True).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def processor_name() -> str:
    """The CPU's model name (the speed of each matrix kernel depends on it), from /proc/cpuinfo where there is one."""
    cpuinfo = Path("/proc/cpuinfo")
    found = re.search(r"model name\s*:\s*(.+)", cpuinfo.read_text()) if cpuinfo.exists() else None
    return found.group(1).strip() if found else platform.machine()


#: The files that hold a model's weights: a Transformers folder's safetensors, a CTranslate2 export's model.bin.
WEIGHTS_FILES = ("*.safetensors", "model.bin")


def weights_digests(model: str) -> dict[str, str]:
    """Digest of each weights file of `model`, a local folder or a Hub id (its copy in the local Hub cache), by
    file name: what a report records beside the model's name, which another folder or a retraining in place can
    reuse. Empty when the files cannot be found (a Hub id not in the cache)."""
    from .file_digests import file_digest  # here: this module is also loaded alone, by its file

    folder = Path(model)
    if not folder.is_dir():
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
        if not isinstance(cached, str):
            return {}
        folder = Path(cached).parent
    files = sorted({path for pattern in WEIGHTS_FILES for path in folder.glob(pattern) if path.is_file()})
    return {path.name: file_digest(path) for path in files}
