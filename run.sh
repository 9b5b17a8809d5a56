#!/usr/bin/env bash
# One entry point for set-up, quickstart and tests on a fresh machine.
#   bash run.sh quickstart   # set up, train a small en->de baseline for a few minutes, translate
#   bash run.sh test         # set up, run the test suite
#   bash run.sh setup        # only create/reuse the virtualenv
# The virtualenv lives in $HF_SRCFEAT_VENV (default: .venv next to this file).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${HF_SRCFEAT_VENV:-$here/.venv}"

setup() {
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    local py="$venv/bin/python"
    # torch first, pinned to the CPU wheel on disk, so no dependency can pull a CUDA build.
    if ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
        "$py" -m pip install --quiet --upgrade pip
        "$py" -m pip install --quiet "torch==2.13.0"
    fi
    # Reinstall the package only when its metadata changed (editable install tracks the code).
    local stamp="$venv/.hf_srcfeat_installed"
    if [ ! -f "$stamp" ] || [ "$here/pyproject.toml" -nt "$stamp" ]; then
        "$py" -m pip install --quiet -e "$here[dev]" "torch==2.13.0"
        touch "$stamp"
    fi
}

# Local stand-ins for the downloads (this project's development machines keep them in ../shared);
# on other machines these stay unset and the data is downloaded on first use.
shared="${HF_SRCFEAT_SHARED:-$here/../shared}"
if [ -z "${HF_SRCFEAT_MULTI30K_DIR:-}" ] && [ -d "$shared/data/multi30k" ]; then
    export HF_SRCFEAT_MULTI30K_DIR="$shared/data/multi30k"
fi

if [ -z "${HF_SRCFEAT_MULTI30K_BLIND_DIR:-}" ] && [ -d "$shared/data/multi30k_blind" ]; then
    export HF_SRCFEAT_MULTI30K_BLIND_DIR="$shared/data/multi30k_blind"
fi

if [ -z "${HF_SRCFEAT_STANZA_DIR:-}" ] && [ -d "$shared/stanza_resources" ]; then
    export HF_SRCFEAT_STANZA_DIR="$shared/stanza_resources"
fi

cmd="${1:-}"
shift || true
case "$cmd" in
    setup) setup ;;
    quickstart) setup; exec "$venv/bin/python" "$here/examples/quickstart.py" "$@" ;;
    test) setup; cd "$here"; exec "$venv/bin/python" -m pytest "$@" ;;
    *) echo "usage: bash run.sh {quickstart|test|setup} [args...]" >&2; exit 2 ;;
esac
