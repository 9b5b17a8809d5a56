"""`code_version()`: which commit produced a result, marked when the code that ran was not that commit's."""

from __future__ import annotations

import shutil
import subprocess
import sys

from .helpers import REPO

#: Loads the module by its file (not the package, whose import loads torch) and prints the version it finds.
PRINT_VERSION = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('provenance', sys.argv[1]); "
                 "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
                 "print(module.code_version())")


def version_of(checkout) -> str:
    environment = {"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(checkout)}
    return subprocess.run([sys.executable, "-c", PRINT_VERSION, str(checkout / "hf_srcfeat" / "provenance.py")],
                          capture_output=True, text=True, check=True, env=environment).stdout.strip()


def test_a_new_uncommitted_module_marks_the_version_and_a_copy_in_another_repository_has_none(tmp_path):
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(checkout)], check=True)
    # The code under test, committed there (the clone has the last commit's)
    shutil.copy(REPO / "hf_srcfeat" / "provenance.py", checkout / "hf_srcfeat" / "provenance.py")
    subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-a", "-m",
                    "the code under test", "--allow-empty"], cwd=checkout, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert version_of(checkout) == commit
    (checkout / "hf_srcfeat" / "new_module.py").write_text("VALUE = 1\n")
    assert version_of(checkout) == commit + "+dirty", "a new file the results may come from"
    index = (checkout / ".git" / "index").stat().st_mtime_ns
    (checkout / "hf_srcfeat" / "provenance.py").touch()
    version_of(checkout)
    assert (checkout / ".git" / "index").stat().st_mtime_ns == index, "reading the version writes nothing"
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    shutil.copytree(checkout / "hf_srcfeat", other / "lib" / "hf_srcfeat")
    assert version_of(other / "lib") == "unknown", "not the other repository's commit"
