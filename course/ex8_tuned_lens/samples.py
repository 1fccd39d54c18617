"""Exercise 8's texts: SmolLM2's own seeded samples, generated once and shipped as ``samples.json``.

    from course.ex8_tuned_lens.samples import load_samples
    texts = load_samples()  # 24 strings: a prompt written for the kata, then SmolLM2's continuation

The tuned lens is trained on the model's own distribution: 24 prompts of every kind (stories,
explanations, instructions, letters, news, dialogue, lists, a poem, code), each continued by
SmolLM2 with nucleus sampling (top-p 0.95, top-k off, temperature 1, 120 new tokens, seed 1), in
one batched ``generate`` call. The file keeps each prompt and continuation as text, so that any
model of the kata can tokenize it (GPT-2 too), the SmolLM2 ids that were generated, and the
versions that made them.

Why a shipped file and not generation at run time: the sampled tokens depend on every float of
every forward pass (a logit that moves in its 7th digit can change which token the top-p draw
picks, and every later token with it), so another version of transformers or torch may sample
other texts; and sampling costs 17 s on a quiet machine, minutes on a busy one. The file is the
same everywhere and costs nothing. :func:`sample_again` samples again and says how many texts
still come out the same; given a file, it writes a new one there (read every text before
shipping one: seeds 2 and 8 each gave a text unfit for a classroom).

The learner's code never reads this file: the notebook and ``grader.py figures`` read it and
pass the texts to ``collect``, and the tests pass their own texts.
"""

from __future__ import annotations

import json
from pathlib import Path

SAMPLES = Path(__file__).with_name("samples.json")

#: One prompt per kind of text; each is an opening the model continues.
PROMPTS = (
    "The lighthouse keeper had not seen a ship in eleven days, until",
    "Photosynthesis is the process by which plants",
    "To bake a simple loaf of bread, you will need",
    "Dear Margaret,\n\nI am writing to tell you that",
    "The city council voted on Tuesday to",
    "\"Where were you last night?\" asked the detective.",
    "The three most important things to know about volcanoes are",
    "Once upon a time, in a village at the edge of a great forest,",
    "The history of the bicycle begins in the early nineteenth century, when",
    "Here is a short poem about the sea:\n\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Many people believe that sleep is wasted time, but",
    "The old map showed an island that no one in the harbour had ever visited.",
    "In mathematics, a prime number is",
    "Our team arrived at the base camp just before the storm, and",
    "The best way to learn a new language is",
    "When the robot opened its eyes for the first time, it",
    "Coffee was first grown in",
    "The museum's newest exhibit, which opens next month,",
    "Step 1: Unplug the printer and wait thirty seconds.",
    "She had always wanted to be a pilot, but her father",
    "The human heart pumps blood through",
    "It was the last day of summer, and the children",
    "A good night's sleep depends on",
)
SEED, MAX_NEW_TOKENS, TOP_P = 1, 120, 0.95


def load_samples(tokenizer=None, max_tokens: int | None = None, path: Path = SAMPLES) -> list[str]:
    """The shipped texts, prompt and continuation joined, in the file's order (the last 6 are
    the held-out part of ``collect``'s default split). With a ``tokenizer`` and ``max_tokens``
    (``kata.context_length(model)``), a text longer than that is cut to its first tokens: the
    tiny GPT-2 of the tests reads 128 tokens at most (GPT-2 and SmolLM2 read every text whole)."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    texts = [sample["prompt"] + sample["continuation"] for sample in document["samples"]]
    if tokenizer is None or max_tokens is None:
        return texts
    return [_cut(text, tokenizer, max_tokens) for text in texts]


def _cut(text: str, tokenizer, max_tokens: int) -> str:
    """``text`` cut to at most ``max_tokens`` tokens (decoding a cut and encoding it again can
    give a few more tokens: cut shorter until it fits)."""
    ids = tokenizer(text)["input_ids"]
    keep = max_tokens
    while len(ids) > max_tokens:
        keep -= 4
        text = tokenizer.decode(ids[:keep])
        ids = tokenizer(text)["input_ids"]
    return text


def generate(model, tokenizer, seed: int = SEED) -> list[tuple[str, list[int]]]:
    """``[(prompt, new ids)]``: one batched, seeded ``generate`` call for every prompt, each
    continuation cut at the model's first end-of-text token.

    The end id comes from the model's generation config (``<|im_end|>``, 2): transformers 4.57
    reads SmolLM2's tokenizer with ``<|im_start|>`` as its end token and no pad token, 5.x with
    ``<|im_end|>`` for both, so the tokenizer's idea of them would cut the texts differently."""
    import torch

    end = model.generation_config.eos_token_id
    end = end[0] if isinstance(end, list) else end
    tokenizer.padding_side = "left"
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(end)
    batch = tokenizer(list(PROMPTS), return_tensors="pt", padding=True)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=True, top_p=TOP_P, top_k=0, temperature=1.0,
                             max_new_tokens=MAX_NEW_TOKENS, pad_token_id=end, eos_token_id=end)
    samples = []
    for prompt, row in zip(PROMPTS, out[:, batch["input_ids"].shape[1]:].tolist()):
        samples.append((prompt, row[:row.index(end)] if end in row else row))
    return samples


def _compact(document: dict) -> str:
    """The document as JSON, one line per sample (a diff then shows which sample changed)."""
    head = json.dumps({k: v for k, v in document.items() if k != "samples"}, indent=1,
                      ensure_ascii=False)[:-2]
    rows = ",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in document["samples"])
    return f'{head},\n "samples": [\n{rows}\n ]\n}}\n'


def sample_again(seed: int = SEED, out: Path | None = None) -> int:
    """Sample the prompts again with SmolLM2 and say how many texts come out as shipped; with
    ``out``, write them there as a new samples file. Returns that count."""
    import time

    import torch
    import transformers

    import kata

    model, tokenizer = kata.load_model("smollm2")
    started = time.perf_counter()
    samples = generate(model, tokenizer, seed)
    print(f"sampled {sum(len(ids) for _, ids in samples)} tokens for {len(samples)} prompts in "
          f"{time.perf_counter() - started:.1f} s")
    shipped = json.loads(SAMPLES.read_text(encoding="utf-8"))["samples"]
    same = sum(old["smollm2_ids"] == ids for old, (_, ids) in zip(shipped, samples))
    print(f"{same} of {len(shipped)} texts sampled as shipped")
    if out is not None:
        document = {
            "about": "SmolLM2-135M-Instruct's own samples (course/ex8_tuned_lens/samples.py), "
                     "the tuned lens's training and held-out texts. Prompts written for the kata.",
            "model": "smollm2", "seed": seed, "top_p": TOP_P, "top_k": 0, "temperature": 1.0,
            "max_new_tokens": MAX_NEW_TOKENS, "transformers": transformers.__version__,
            "torch": torch.__version__,
            "samples": [{"prompt": p, "continuation": tokenizer.decode(ids), "smollm2_ids": ids}
                        for p, ids in samples],
        }
        Path(out).write_text(_compact(document), encoding="utf-8")
        print(f"wrote {out}")
    return same
