"""The kata's performance file, ``docs/performance.md``: how long learners and instructors wait,
and how much memory, each measure beside its target.

    python benchmarks/run.py                  # every group (long: run it on a quiet machine)
    python benchmarks/run.py --only warm      # one group again; the other groups keep their rows

Groups: scaling, patching, tuned, exercise, warm, suite, first, grader, sandbox
(:data:`GROUPS`). The file is generated, a row per measure: the measure, its value, its target,
the date, the machine (cores, architecture, Python, torch, transformers) and the load average
before and after its group ran. A partial run (``--only``) rewrites only its groups' rows and
keeps the others, each with its own date; a group never measured says so. Never edit the file by
hand, and never narrate a run in the docs: what a measurement showed, and why, belongs in the
commit message.

Targets: one exercise's tests in a fresh process within 2.5x the import floor (measured beside
it), a warm re-run within 1 s, the maintainer suite (``bash run.sh test``) within 5 minutes,
peak memory under 2.5 GB, fast_scaling_experiment at least 5x faster than scaling_experiment on
SmolLM2, fast_patching_effect at least 3x faster than patching_effect (and equal to 1e-4),
attribution_patching at most 2x one forward and backward pass, exercise 8's tuned lens data
ready within 60 s and figure 16's training within 120 s (beating the logit lens on held-out text
by the factors its docstring promises), a correct submission graded sandboxed within 30 s and
the sandbox costing less than 20% of that, a class graded at -j 2 in at most 18 s a submission
(200 learners on 2 cores within an hour).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PYTEST = [sys.executable, "-m", "pytest", "--impl", "solutions", "-q", "-p", "no:cacheprovider"]


def timed_run(command, env=None, cwd=None) -> tuple[float, int, int]:
    """Wall seconds, exit code and peak RSS (MB) of the largest process the command waited for."""
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    run = subprocess.run(command, cwd=cwd or ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if run.returncode not in (0, 1):
        print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
    return seconds, run.returncode, max(peak_kb, before) // 1024


def scaling_rows(runs: int) -> list[tuple[str, str, str]]:
    import torch

    import kata
    from course.ex3_manipulation.solution import scaling_experiment
    from course.ex4_fast_scaling.solution import fast_scaling_experiment

    model, tokenizer = kata.load_model("smollm2")
    ids = tokenizer(kata.KAFKA_TEXT, return_tensors="pt")["input_ids"]
    target = tokenizer(kata.TARGET_WORD, add_special_tokens=False)["input_ids"][0]

    def median_seconds(function):
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            values = function(model, ids, target, 0.8)
            times.append(time.perf_counter() - started)
        return statistics.median(times), values

    slow, slow_values = median_seconds(scaling_experiment)
    fast, fast_values = median_seconds(fast_scaling_experiment)
    difference = (torch.as_tensor(slow_values) - fast_values).abs().max().item()
    return [
        ("scaling_experiment, SmolLM2, Kafka sentence", f"{slow:.2f} s (median of {runs})", ""),
        ("fast_scaling_experiment, same input", f"{fast:.2f} s (median of {runs})", ""),
        ("speed-up", f"{slow / fast:.1f}x", ">= 5x"),
        ("largest difference", f"{difference:.1e}", "<= 1e-4"),
    ]


#: The floor issue 25 names: starting Python, torch and transformers (whose model classes load lazily).
IMPORT_FLOOR = [sys.executable, "-c",
                "import torch, transformers; from transformers import AutoModelForCausalLM"]
#: What any test process that builds a model also pays: the model code itself (modeling_utils, and
#: through it torch.distributed.tensor), which the floor's lazy import does not load.
MODEL_FLOOR = [sys.executable, "-c", "import torch; from transformers import GPT2LMHeadModel; GPT2LMHeadModel"]


def patching_flops(model, n_tokens: int) -> tuple[float, float]:
    """GFLOP of ``patching_effect``'s loop and of ``fast_patching_effect``'s two passes.

    Counted as 2 FLOP per weight of each Linear layer of a block per token (attention scores,
    norms and activations are left out: with 10 tokens they are a few percent), plus the
    unembedding, 2 * vocab_size * d_model per unembedded position.
    """
    import torch

    import kata

    blocks = kata.blocks(model)
    per_token = 2 * sum(m.weight.numel() for m in blocks[0].modules()
                        if isinstance(m, torch.nn.Linear))
    unembed = 2 * model.get_output_embeddings().weight.numel()
    n, t = len(blocks), n_tokens
    # the loop: a clean and a corrupted run, then n * t patched runs, every position unembedded
    loop = (n * t + 2) * (t * n * per_token + t * unembed)
    # two passes: the clean run (every position), then block j on the corrupted row and the
    # rows patched at blocks 0 .. j - 1, t each, their last position unembedded
    rows = sum(1 + t * j for j in range(n))
    fast = (t * n * per_token + t * unembed) + rows * t * per_token + (1 + t * n) * unembed
    return loop / 1e9, fast / 1e9


def patching_rows(runs: int) -> list[tuple[str, str, str]]:
    """Exercises 6 and 7 on SmolLM2: the loop against the two-pass map, the estimate against one
    forward and backward pass, each pair measured alternately in one run (ratios, so that a
    loaded machine slows both alike)."""
    import torch

    import kata
    from course.ex6_activation_patching.solution import fast_patching_effect, patching_effect
    from course.ex7_attribution_patching.solution import attribution_patching

    model, tokenizer = kata.load_model("smollm2")
    clean = tokenizer(kata.CLEAN_PROMPT, return_tensors="pt")["input_ids"]
    corrupted = tokenizer(kata.CORRUPTED_PROMPT, return_tensors="pt")["input_ids"]
    good = tokenizer(kata.CLEAN_ANSWER, add_special_tokens=False)["input_ids"][0]
    bad = tokenizer(kata.CORRUPTED_ANSWER, add_special_tokens=False)["input_ids"][0]
    args = (model, clean, corrupted, good, bad)

    def forward_backward():
        log_probs = torch.log_softmax(model(corrupted).logits[0, -1], dim=-1)
        (log_probs[good] - log_probs[bad]).backward()
        model.zero_grad(set_to_none=True)

    def seconds(function):
        started = time.perf_counter()
        value = function()
        return time.perf_counter() - started, value

    fast_patching_effect(*args)  # warm-up
    slow_times, fast_times, attribution_times, pass_times = [], [], [], []
    for _ in range(runs):
        slow_seconds, slow = seconds(lambda: patching_effect(*args))
        fast_seconds, fast = seconds(lambda: fast_patching_effect(*args))
        slow_times.append(slow_seconds)
        fast_times.append(fast_seconds)
        attribution_times.append(seconds(lambda: attribution_patching(*args))[0])
        pass_times.append(seconds(forward_backward)[0])
        print(f"  patching: loop {slow_seconds:.1f} s, two passes {fast_seconds:.1f} s, "
              f"attribution {attribution_times[-1]:.2f} s, forward and backward "
              f"{pass_times[-1]:.2f} s", file=sys.stderr, flush=True)
    slow_s, fast_s = statistics.median(slow_times), statistics.median(fast_times)
    attribution_s, pass_s = statistics.median(attribution_times), statistics.median(pass_times)
    loop_gflop, fast_gflop = patching_flops(model, clean.shape[1])
    difference = (slow - fast).abs().max().item()
    return [
        ("patching_effect (300 patched passes), SmolLM2, Eiffel/Colosseum",
         f"{slow_s:.2f} s (median of {runs}), about {loop_gflop:.0f} GFLOP", ""),
        ("fast_patching_effect (two passes), same input",
         f"{fast_s:.2f} s (median of {runs}), about {fast_gflop:.0f} GFLOP", ""),
        ("fast patching speed-up (the FLOP ratio beside it; the rest is the loop's per-pass cost)",
         f"{slow_s / fast_s:.1f}x (FLOP ratio {loop_gflop / fast_gflop:.1f}x)", ">= 3x"),
        ("fast patching, largest difference from the loop", f"{difference:.1e}", "<= 1e-4"),
        ("attribution_patching against one forward and backward pass of the corrupted prompt",
         f"{attribution_s:.2f} s against {pass_s:.2f} s: {attribution_s / pass_s:.1f}x", "<= 2x"),
    ]


def exercise_rows(runs: int) -> list[tuple[str, str, str]]:
    """A learner's ``pytest course/exN_*`` on the solutions, beside the import floor:
    the two alternate, run after run, so both see the same load."""
    from grading.core.declarations import load_exercises

    rows, floors, model_floors = [], [], []
    for exercise in load_exercises():
        times = []
        for _ in range(runs):
            floors.append(timed_run(IMPORT_FLOOR)[0])
            model_floors.append(timed_run(MODEL_FLOOR)[0])
            times.append(timed_run(PYTEST + [exercise.tests])[0])
        rows.append((exercise.tests, statistics.median(times)))
    floor, model_floor = statistics.median(floors), statistics.median(model_floors)
    table = [("import floor: python -c 'import torch, transformers; from transformers import "
              "AutoModelForCausalLM'", f"{floor:.1f} s (median of {len(floors)})", ""),
             ("the same with the model code loaded: python -c 'import torch; from transformers "
              "import GPT2LMHeadModel; GPT2LMHeadModel'",
              f"{model_floor:.1f} s (median of {len(model_floors)}), {model_floor / floor:.1f}x", "")]
    table += [(f"pytest {tests} (fresh process, warm caches), and its ratio to the floor",
               f"{seconds:.1f} s (median of {runs}), {seconds / floor:.1f}x", "<= 2.5x")
              for tests, seconds in rows]
    return table


def tuned_rows() -> list[tuple[str, str, str]]:
    """Exercise 8's recipe on SmolLM2, as figure 16 draws it (one torch thread, as the figures
    child and the notebook's kernel run): the data ready (the model loaded, the shipped samples
    collected), the training, and the held-out ranks it promises, against the logit lens's."""
    import torch

    import kata
    from course.ex5_logit_lens.solution import logit_lens
    from course.ex8_tuned_lens import solution as ex8
    from course.ex8_tuned_lens.drawing import EVERY, RECIPE
    from course.ex8_tuned_lens.samples import load_samples

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        started = time.perf_counter()
        model, tokenizer = kata.load_model("smollm2")
        loaded = time.perf_counter()
        data = ex8.collect(model, tokenizer, load_samples())
        ready = time.perf_counter()
        n_layers = len(kata.blocks(model))
        layers = list(range(0, n_layers, EVERY))
        fresh = ex8.make_translators(model)
        state = ex8.train_tuned_lens(model, fresh, data, layers=layers, progress=False, **RECIPE)
        trained = time.perf_counter()
        held_out = data["held_out"]
        logit = ex8.next_token_ranks(model, fresh, held_out).float().median(dim=1).values
        tuned = ex8.next_token_ranks(model, state, held_out).float().median(dim=1).values
        block = held_out["hidden"][:, :256]  # one block of positions, as exercise 5 reads it
        exact = max((ex8.lens_log_probs(model, fresh, block[i], i).detach() - lens).abs().max().item()
                    for i, lens in enumerate(logit_lens(model, block)))
    finally:
        torch.set_num_threads(threads)
    sizes = {name: data[name]["next_ids"].shape[0] for name in ("train", "held_out")}
    recipe = (f"hidden states {layers}, {RECIPE['steps']} Adam steps of "
              f"{RECIPE['tokens_per_step']} tokens, lr {RECIPE['lr']:g}, seed {RECIPE['seed']}")
    rows = [
        (f"tuned lens data ready: SmolLM2 loaded ({loaded - started:.1f} s) and its 24 shipped "
         f"samples collected ({sizes['train']:,} positions to train on, {sizes['held_out']:,} "
         "held out), one torch thread", f"{ready - started:.1f} s", "<= 60 s"),
        (f"tuned lens training, figure 16's recipe ({recipe}), one torch thread",
         f"{trained - ready:.0f} s", "<= 120 s"),
        ("untrained tuned lens against exercise 5's logit lens, 256 held-out positions read as "
         "one block, largest difference", f"{exact:.1e}", "0"),
    ]
    for layer, factor in ((0, 20), *((layer, 2) for layer in (10, 15, 20))):
        rows.append((f"held-out median rank of the true next token at hidden state {layer}: "
                     "logit lens, tuned lens, ratio",
                     f"{logit[layer]:,.0f}, {tuned[layer]:,.0f}: "
                     f"{logit[layer] / max(tuned[layer], 1):.1f}x", f">= {factor}x"))
    return rows


WARM_RERUNS = """
import statistics, sys
from pathlib import Path
from grading.views.warm import rerun
from grading.core.declarations import load_exercises
for exercise in load_exercises():
    rerun(Path.cwd(), exercise, "solutions", quiet=True)  # warm-up: imports and model loads
    times = [rerun(Path.cwd(), exercise, "solutions", quiet=True)[1] for _ in range(int(sys.argv[1]))]
    print("WARM", exercise.tests, statistics.median(times))
"""


def warm_rows(runs: int) -> list[tuple[str, str, str]]:
    """What `grader.py watch --warm` costs per save: one exercise's tests in a warm process."""
    run = subprocess.run([sys.executable, "-c", WARM_RERUNS, str(runs)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    rows = []
    for line in run.stdout.splitlines():
        if line.startswith("WARM "):
            _, tests, seconds = line.split()
            rows.append((f"re-run of {tests} in a warm process (grader.py watch --warm)",
                         f"{float(seconds):.1f} s (median of {runs})", "<= 1 s"))
    return rows


def suite_rows() -> list[tuple[str, str, str]]:
    """The README's test command, as CI runs it on each leg: every core, one xdist worker each."""
    seconds, code, peak = timed_run(["bash", "run.sh", "test", "-q"])
    return [
        (f"maintainer suite (bash run.sh test), warm caches, exit {code}", f"{seconds:.0f} s",
         "<= 300 s"),
        ("peak memory of one process in the suite", f"{peak} MB", "< 2500 MB"),
    ]


def first_run_rows() -> list[tuple[str, str, str]]:
    cache = tempfile.mkdtemp(prefix="kata-cold-cache-")
    try:
        env = {**os.environ, "KATA_CACHE": cache}
        seconds, code, _ = timed_run(PYTEST + ["course/ex1_hidden_states/test_public.py"], env=env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return [("first run: ex1 tests with the SmolLM2 conversion (cold cache)", f"{seconds:.0f} s", "")]


#: The class the batch's throughput is projected to: 200 learners on this machine.
CLASS_SIZE = 200


def grader_rows(count: int) -> list[tuple[str, str, str]]:
    """A class of ``count`` synthetic submissions (benchmarks/make_submissions.py: correct ones in
    every layout, partly done ones and one of every fault, an endless loop included) graded at
    -j 2, kept, so that the CPU of each phase is read from its logs; the time a submission, and
    what it projects to for a class of :data:`CLASS_SIZE`."""
    maker = ROOT / "benchmarks" / "make_submissions.py"
    if not maker.exists():
        return [("grader on a batch of submissions", "skipped: benchmarks/make_submissions.py missing", "")]
    folder = Path(tempfile.mkdtemp(prefix="kata-submissions-"))
    try:
        subprocess.run([sys.executable, str(maker), str(folder / "subs"), "--count", str(count)],
                       cwd=ROOT, check=True, capture_output=True)
        submissions = sorted(str(p) for p in (folder / "subs").iterdir())
        kept = folder / "kept"
        kept.mkdir()
        seconds, code, _ = timed_run([sys.executable, "grader.py", "batch", *submissions, "-j", "2",
                                      "--keep"], env={**os.environ, "TMPDIR": str(kept)})
        breakdown = phase_breakdown(kept)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    each = seconds / len(submissions)
    rows = [(f"grader: {len(submissions)} synthetic submissions, -j 2",
             f"{seconds:.0f} s, {each:.1f} s a submission", "<= 18 s"),
            (f"the same, projected for a class of {CLASS_SIZE} learners",
             f"{CLASS_SIZE * each / 3600:.1f} h", "<= 1 h")]
    if breakdown:
        total = sum(breakdown.values())
        parts = ", ".join(f"{name} {cpu / len(submissions):.2f} s"
                          for name, cpu in sorted(breakdown.items()))
        rows.append((f"its CPU time a submission, by phase: {parts} (an endless loop's and other "
                     "killed processes' CPU is not counted)",
                     f"{total / len(submissions):.1f} CPU s", ""))
    return rows


def phase_breakdown(kept: Path) -> dict[str, float]:
    """CPU seconds per phase of grading, from the logs a kept batch (``--keep``) left in
    ``kept`` (CPU, unlike wall time, does not depend on what else the machine runs): the trusted
    side's warm-up (the batch's worker, once; or each submission's own) and each exercise's tests;
    the learner's sandbox start (interpreter, imports, models) and each exercise's process."""
    import glob
    import json

    cpu: dict[str, float] = {}

    def add(name: str, seconds: float) -> None:
        cpu[name] = round(cpu.get(name, 0) + seconds, 2)

    for path in glob.glob(str(kept / "kata-batch-*" / "trusted" / "logs" / "batch-worker.jsonl")):
        for line in Path(path).read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "batch_warm":
                add("trusted warm-up, once per batch", event["cpu"])
    for path in glob.glob(str(kept / "kata-batch-*" / "*" / "logs" / "record-*.jsonl")):
        for line in Path(path).read_text().splitlines():
            event = json.loads(line)
            kind = event.get("event")
            if kind == "warm":
                add("trusted warm-up per submission", event["cpu"])
            elif kind in ("child_done", "child_died"):
                add(f"trusted {event['exercise']}", event["cpu"])
    for path in glob.glob(str(kept / "kata-batch-*" / "*" / "logs" / "learner-*.err")):
        phases = {}
        for line in Path(path).read_text(errors="replace").splitlines():
            words = line.split()
            if len(words) == 4 and words[0] == "kata-learner-phase":
                phases[words[1]] = float(words[3])
            elif len(words) == 3 and words[0] == "kata-learner-cpu":
                add(f"learner {words[1]}", float(words[2]))
        if Path(path).name == "learner-zygote.err":  # kata/serve/zygote.py's own start
            if "models" in phases:
                add("learner warm parent's start, once per batch", phases["models"])
            continue
        before = 0.0
        for name, label in (("started", "interpreter and torch"), ("imports", "imports"),
                            ("models", "models"), ("joined", "forked from the warm parent")):
            if name in phases:
                add(f"learner start: {label}", phases[name] - before)
                before = phases[name]
    return cpu


def _in_place_copy(folder: Path) -> Path:
    """A copy of the kata whose exercises/ are the solutions: graded in place, tests and code in
    one process, as a learner's own `python grader.py` does."""
    from grading.core.declarations import load_exercises
    from grading.core.synthetic import make_submission

    copy = folder / "in-place"
    for item in ("kata", "course", "grading", "conftest.py", "pyproject.toml", "grader.py"):
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, copy / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / item)
    make_submission(ROOT, copy, {}, load_exercises(), layout="exercises")
    shutil.copy2(ROOT / "exercises" / "__init__.py", copy / "exercises" / "__init__.py")
    return copy


def sandbox_rows(runs: int = 3) -> list[tuple[str, str, str]]:
    """One correct submission (the solutions as exercises/) graded three ways in one run: tests and
    code in one process (the learner's own grader, the old batch's cost), and across the trusted
    boundary (tests here, code in a learner process) without and with the sandbox; and where the
    trusted worker spends its CPU."""
    folder = Path(tempfile.mkdtemp(prefix="kata-sandbox-bench-"))
    breakdown: dict[str, float] = {}
    try:
        from grading.core.declarations import load_exercises
        from grading.core.synthetic import make_submission

        submission = make_submission(ROOT, folder / "correct", {}, load_exercises(),
                                     layout="exercises")
        in_place = _in_place_copy(folder)
        commands = {
            "in one process": ([sys.executable, "grader.py"], in_place),
            "split, no sandbox": ([sys.executable, "grader.py", "batch", str(submission),
                                   "--no-sandbox"], ROOT),
            "split, sandboxed": ([sys.executable, "grader.py", "batch", str(submission)], ROOT),
        }
        times = {}
        for label, (command, cwd) in commands.items():
            timed_run(command, cwd=cwd)  # warm-up: model cache and file caches
            times[label] = statistics.median(timed_run(command, cwd=cwd)[0] for _ in range(runs))
        kept = folder / "kept"
        kept.mkdir()
        timed_run([sys.executable, "grader.py", "batch", str(submission), "--keep"],
                  env={**os.environ, "TMPDIR": str(kept)})
        breakdown = phase_breakdown(kept)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    split = times["split, no sandbox"] / times["in one process"] - 1
    sandbox = times["split, sandboxed"] / times["split, no sandbox"] - 1
    cores = os.cpu_count() or 1
    rows = [
        ("grader: one correct submission, tests and code in one process (the learner's own "
         "grader; the old batch)", f"{times['in one process']:.1f} s (median of {runs})", ""),
        ("grader: the same across the trusted boundary, --no-sandbox",
         f"{times['split, no sandbox']:.1f} s (median of {runs})", ""),
        ("grader: the same across the trusted boundary, sandboxed (bwrap; `batch`)",
         f"{times['split, sandboxed']:.1f} s (median of {runs})", "<= 30 s"),
        ("cost of the trusted-side split", f"{split:+.0%}", ""),
        ("cost of the sandbox", f"{sandbox:+.0%}", "< 20%"),
    ]
    if breakdown:
        total = sum(breakdown.values())
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(breakdown.items()))
        rows.append((f"its CPU time, by phase (both sides of the boundary): {parts}",
                     f"{total:.1f} CPU s (>= {total / cores:.1f} s on {cores} cores)", ""))
    return rows


GROUPS = {
    "scaling": lambda args: scaling_rows(args.runs),
    "patching": lambda args: patching_rows(args.runs),
    "tuned": lambda args: tuned_rows(),
    "exercise": lambda args: exercise_rows(args.runs),
    "warm": lambda args: warm_rows(args.runs),
    "suite": lambda args: suite_rows(),
    "first": lambda args: first_run_rows(),
    "grader": lambda args: grader_rows(args.submissions),
    "sandbox": lambda args: sandbox_rows(min(3, args.runs)),
}


PERFORMANCE = ROOT / "docs" / "performance.md"
NOT_MEASURED = "not measured yet"
HEADER = """# Performance

<!-- Written by benchmarks/run.py: do not edit by hand. -->
Generated by `python benchmarks/run.py`: do not edit by hand. `python benchmarks/run.py --only
GROUP` measures one group again and keeps the other groups' rows, each with its own date and
machine. The load average is the machine's one-minute load before and after the group ran.
"""
COLUMNS = ("group", "measure", "value", "target", "date", "machine", "load average before, after")


@dataclass(frozen=True)
class Row:
    """One measure of the performance file."""

    group: str
    measure: str
    value: str = ""
    target: str = ""
    date: str = ""
    machine: str = ""
    load: str = ""

    def cells(self) -> tuple[str, ...]:
        return (self.group, self.measure, self.value, self.target, self.date, self.machine,
                self.load)


def machine() -> str:
    """This machine as the rows name it: cores, architecture, Python, torch, transformers."""
    import torch
    import transformers

    return (f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(c) for c in row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def read_rows(text: str) -> list[Row]:
    """The rows of a performance file's table (its header and separator left out)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip().replace("\\|", "|")
                 for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == len(COLUMNS) and cells[0] != COLUMNS[0] and not set(cells[0]) <= {"-"}:
            rows.append(Row(*cells))
    return rows


def merged(old: list[Row], new: list[Row], measured: set[str]) -> list[Row]:
    """Every group's rows, in :data:`GROUPS`'s order: the ``measured`` groups' from ``new``,
    the others' from ``old``; a group with rows in neither says it was not measured yet."""
    rows = []
    for group in GROUPS:
        kept = [r for r in (new if group in measured else old) if r.group == group]
        rows += kept or [Row(group, NOT_MEASURED)]
    return rows


def write_performance(rows: list[Row], path: Path = PERFORMANCE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{HEADER}\n{table(rows)}\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=GROUPS, action="append", metavar="GROUP",
                        help=f"measure only this group ({', '.join(GROUPS)}); may be repeated")
    parser.add_argument("--runs", type=int, default=5, help="runs per timed measure (median)")
    parser.add_argument("--submissions", type=int, default=20, help="size of the grader's batch")
    args = parser.parse_args()

    here = machine()
    new = []
    for name in args.only or GROUPS:
        print(f"benchmark: {name} ...", file=sys.stderr, flush=True)
        before = os.getloadavg()[0]
        measured = GROUPS[name](args)
        load = f"{before:.1f}, {os.getloadavg()[0]:.1f}"
        date = time.strftime("%Y-%m-%d")
        new += [Row(name, measure, value, target, date, here, load)
                for measure, value, target in measured]
    print(table(new))
    old = read_rows(PERFORMANCE.read_text(encoding="utf-8")) if PERFORMANCE.exists() else []
    write_performance(merged(old, new, set(args.only or GROUPS)))
    print(f"wrote {PERFORMANCE.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
