"""Exercise 8's checks: the tuned lens computed here, and what a wrong one looks like.

Every expected value is computed here from the model's own modules and weights and from torch,
never from the solution: hidden states straight from ``model(..., output_hidden_states=True)``
(``course/shared/reference.py``), a translator as ``h + h @ A.T + b``, the final norm called as
a module, the unembedding as a matrix product with its weight, KL(final || lens) written out as
a sum, and training as its own loop of ``torch.optim.Adam`` steps on the positions the contract
names (:func:`batch_positions`, the given helper written again). They are computed from the
test's own inputs before the function under test sees them (it gets copies). Each ``check_*``
function reads a result and, when it is wrong, names the mistake by the shape of its wrongness
(a translator that doubles its input, the final norm skipped, the KL the other way round, the
held-out part trained on, Adam started afresh on resume...) through
:func:`~course.shared.diagnosis.diagnose`, with the id the mistakes catalogue uses.

The lens and training tests use small GPT-2s of fixed seeds (3 blocks, 16 numbers wide, 97
tokens, weights spread 0.2 so that their predictions differ from place to place) whose final norm
has random weights and biases too, so that a norm skipped or applied twice shows; a training test
builds its own model, so that whatever the code under test does to it stays in that test.
"""

import copy
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import kata  # noqa: E402
from course.shared.diagnosis import diagnose  # noqa: E402
from course.shared.support import (  # noqa: E402
    check_shape,
    check_tensor,
    computed_once,
    drawn_heatmaps,
    expect,
    heatmap_axes,
    reference_hidden_states,
)

#: Texts of the tiny GPT-2's tests: 5 texts, so 2 are held out (ceil(0.25 * 5)).
TEXTS = (
    kata.PENGUIN_TEXT,
    kata.KAFKA_TEXT,
    "The lighthouse keeper had not seen a ship in eleven days.",
    "Photosynthesis is the process by which plants make their food.",
    "Dear Margaret, I am writing to tell you about the garden.",
)
#: The small models' sizes: blocks, heads, width, vocabulary, and the weights' spread.
SMALL = {"layers": 3, "heads": 2, "width": 16, "vocab": 97, "spread": 0.2}
SMALL_SEED = 8


# ----------------------------------------------------------------------------- models and data


def with_random_norm(model, generator: torch.Generator):
    """``model`` with random weights and biases in its final norm (a norm applied twice, or not
    at all, then changes the lens), in place; returns it."""
    norm = kata.final_norm(model)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(norm.weight.shape, generator=generator))
        if getattr(norm, "bias", None) is not None:
            norm.bias.copy_(0.3 * torch.randn(norm.bias.shape, generator=generator))
    return model


def small_model(seed: int = SMALL_SEED, layers: int = 3, heads: int = 2, width: int = 16,
                vocab: int = 97, spread: float = 0.2):
    """A GPT-2 of these sizes, its weights from ``seed``, its final norm random: the same model
    every time for the same arguments, and a new object each call (a copy of the one built
    first, which nothing else holds)."""
    key = (seed, layers, heads, width, vocab, spread)
    if key not in _BUILT:
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=layers, n_head=heads, n_embd=width, vocab_size=vocab,
                            n_positions=64, initializer_range=spread, bos_token_id=0,
                            eos_token_id=0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = GPT2LMHeadModel(config).eval()
        _BUILT[key] = with_random_norm(model, torch.Generator().manual_seed(seed + 1))
    return copy.deepcopy(_BUILT[key])


#: The small models built so far, by their arguments: never handed out, only copied.
_BUILT: dict = {}


def sizes_of(model) -> tuple[int, int, int]:
    """``(n_layers, d_model, vocab_size)`` of a model."""
    unembed = model.get_output_embeddings()
    return len(kata.blocks(model)), unembed.in_features, unembed.out_features


def made_data(model, generator: torch.Generator, texts: int = 6, held: int = 2,
              lengths: tuple[int, int] = (6, 14)) -> dict:
    """``collect``'s result for ``texts`` random token sequences (the last ``held`` held out),
    computed here: ``{"train": {"hidden", "next_ids"}, "held_out": {...}}``."""
    parts = {"train": ([], []), "held_out": ([], [])}
    for k in range(texts):
        length = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=generator))
        ids = torch.randint(0, model.config.vocab_size, (1, length), generator=generator)
        hidden = reference_hidden_states(model, ids)  # (n_layers + 1, T, d_model)
        states, following = parts["held_out" if k >= texts - held else "train"]
        states.append(hidden[:, :-1])
        following.append(ids[0, 1:])
    return {name: {"hidden": torch.cat(states, dim=1), "next_ids": torch.cat(following)}
            for name, (states, following) in parts.items()}


def random_translators(model, generator: torch.Generator, scale: float = 0.3) -> dict:
    """Translators far from zero: random ``A`` (scaled by 1 / sqrt(d_model)) and ``b``."""
    n_layers, d_model, _ = sizes_of(model)
    return {"A": [torch.randn(d_model, d_model, generator=generator) * scale / math.sqrt(d_model)
                  for _ in range(n_layers)],
            "b": [torch.randn(d_model, generator=generator) * scale for _ in range(n_layers)]}


def zero_translators(model) -> dict:
    n_layers, d_model, _ = sizes_of(model)
    return {"A": [torch.zeros(d_model, d_model) for _ in range(n_layers)],
            "b": [torch.zeros(d_model) for _ in range(n_layers)]}


def zeros_like_translators(A, b) -> tuple[list, list]:
    return [torch.zeros_like(a) for a in A], [torch.zeros_like(v) for v in b]


def copied(value):
    """A deep copy of plain data (tensors cloned): what the code under test gets."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(v) for v in value)
    return value


# ----------------------------------------------------------------------------- reference values


def batch_positions(n_positions: int, tokens_per_step: int, seed: int, step: int) -> torch.Tensor:
    """The positions step ``step`` of a run seeded ``seed`` trains on, as the contract names
    them (the given ``_batch_positions``, written again here)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randperm(n_positions, generator=generator)[:tokens_per_step]


def reference_translate(A, b, hidden, layer: int, transpose: bool = True,
                        residual: bool = True) -> torch.Tensor:
    """``hidden + hidden @ A[layer].T + b[layer]`` (``transpose`` False: ``@ A[layer]``;
    ``residual`` False: without ``hidden +``)."""
    a = A[layer].T if transpose else A[layer]
    return (hidden if residual else 0) + hidden @ a + b[layer]


def reference_lens(model, A, b, hidden, layer: int, norm: bool = True, norm_last: bool = False,
                   translate_first: bool = True) -> torch.Tensor:
    """Log-probabilities of ``hidden`` (states of hidden state ``layer``) through the tuned lens
    of ``A`` and ``b``: translated, normed, unembedded as a product with the unembedding's
    weight. The flags build wrong lenses: ``norm`` False skips the norm, ``norm_last`` norms the
    last hidden state too, ``translate_first`` False translates after the norm."""
    n_layers = len(kata.blocks(model))
    final_norm = kata.final_norm(model)
    weight = model.get_output_embeddings().weight.detach()
    h = hidden.detach().float()
    with torch.no_grad():
        if layer < n_layers:
            if translate_first:
                h = reference_translate(A, b, h, layer)
            h = final_norm(h) if norm else h
            if not translate_first:
                h = reference_translate(A, b, h, layer)
        elif norm_last:
            h = final_norm(h)
        return torch.log_softmax(h @ weight.T, dim=-1)


def reference_kl(lens, final) -> torch.Tensor:
    """KL(final || lens) written out: summed over the vocabulary, averaged over the positions
    (float64)."""
    lens, final = lens.double(), final.double()
    per_position = (final.exp() * (final - lens)).sum(-1)
    return per_position.reshape(-1).mean()


def reference_training(model, translators: dict, data: dict, layers: list[int], steps: int,
                       tokens: int, lr: float, seed: int, restart_adam_at: int | None = None,
                       start_again_at: int | None = None, part: str = "train") -> dict:
    """Adam on the translators of ``layers``, step by step as the contract says; returns
    ``{"A", "b", "losses"}`` (float64 losses).

    Wrong runs, for the diagnoses: ``restart_adam_at`` k starts a new Adam at step k (a resume
    that dropped the optimizer's state); ``start_again_at`` k goes on after step k with the
    steps 0, 1, ... again (a resume that ignored the steps done), ``steps`` of them; ``part``
    "held_out" trains on the held-out part, "both" on the two parts one after the other."""
    n_layers = len(kata.blocks(model))
    A = [a.detach().clone().float() for a in translators["A"]]
    b = [v.detach().clone().float() for v in translators["b"]]
    leaves = [(A[layer].clone().requires_grad_(True), b[layer].clone().requires_grad_(True))
              for layer in layers]
    flat = [tensor for pair in leaves for tensor in pair]
    if part == "both":
        hidden = torch.cat([data["train"]["hidden"], data["held_out"]["hidden"]], dim=1)
    else:
        hidden = data[part]["hidden"]
    optimizer = torch.optim.Adam(flat, lr=lr)
    schedule = list(range(steps))
    if start_again_at is not None:
        schedule = list(range(start_again_at)) + list(range(steps))
    losses = []
    for count, step in enumerate(schedule):
        if count == restart_adam_at:
            optimizer = torch.optim.Adam(flat, lr=lr)
        positions = batch_positions(hidden.shape[1], tokens, seed, step)
        with torch.no_grad():
            final = reference_lens(model, A, b, hidden[n_layers, positions], n_layers)
        total = 0
        for layer, (a, bias) in zip(layers, leaves):
            h = kata.final_norm(model)(hidden[layer, positions] + hidden[layer, positions] @ a.T
                                       + bias)
            lens = torch.log_softmax(h @ model.get_output_embeddings().weight.detach().T, -1)
            total = total + (final.exp() * (final - lens)).sum(-1).mean()
        gradients = torch.autograd.grad(total, flat)
        for tensor, gradient in zip(flat, gradients):
            tensor.grad = gradient
        optimizer.step()
        losses.append(float(total.detach()))
    for layer, (a, bias) in zip(layers, leaves):
        A[layer], b[layer] = a.detach(), bias.detach()
    return {"A": A, "b": b, "losses": losses}


def rank_bounds(rows, chosen):
    """The ranks the ids ``chosen`` may rightly have in ``rows`` (log-probabilities over the
    last dimension): from the count of strictly better tokens to that plus the ties."""
    value = rows.gather(-1, chosen[..., None])
    return (rows > value).sum(-1), (rows >= value).sum(-1) - 1


def within(ranks, bounds, shift: int = 0) -> bool:
    low, high = bounds
    return ranks.shape == low.shape and bool(((ranks >= low + shift) & (ranks <= high + shift)).all())


def reference_rank_bounds(model, translators, part, translated: bool = True):
    """Rank bounds ``(n_layers + 1, N)`` of the true next tokens of ``part`` under the lens of
    ``translators`` (``translated`` False: under the logit lens)."""
    n_layers = len(kata.blocks(model))
    A, b = translators["A"], translators["b"]
    if not translated:
        A, b = zeros_like_translators(A, b)
    rows = torch.stack([reference_lens(model, A, b, part["hidden"][layer], layer)
                        for layer in range(n_layers + 1)])
    return rank_bounds(rows, part["next_ids"][None, :].expand(n_layers + 1, -1))


# ----------------------------------------------------------------------------- plain data


def not_plain(value, where: str = "the result") -> str | None:
    """Where ``value`` holds something that is not plain data (tensors, numbers, strings,
    lists, tuples, dicts, None), and what it is; None when it is all plain."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor, np.ndarray,
                                           np.generic, torch.dtype, torch.Size)):
        return None
    if type(value) in (list, tuple):
        for k, item in enumerate(value):
            found = not_plain(item, f"{where}[{k}]")
            if found:
                return found
        return None
    if type(value) is dict:
        for key, item in value.items():
            found = not_plain(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    return f"{where} is a {type(value).__name__}"


def check_plain(value, function: str, diagnosis: str) -> None:
    """``value`` must be plain data: the grader can send nothing else back."""
    found = not_plain(value)
    expect(found is None, diagnosis, (
        f"{function} returned something that is not plain data: {found}. Return tensors, "
        "numbers, lists and dicts only (an nn.Module or an optimizer object cannot be saved "
        "with its values by torch.save, cannot be sent to the grader, and keeps a reference to "
        "what it was built from): for an optimizer, its state_dict()"))


# ----------------------------------------------------------------------------- collect


def reference_collect(model, tokenizer, texts, held_out: float = 0.25) -> dict:
    """``collect``'s result computed here (the last ``ceil(held_out * len(texts))`` texts held
    out). Each part also holds what wrong answers would give: ``"own_ids"`` (each position's
    own token), ``"later"`` (the hidden states of positions 1 .. T - 1, the first dropped
    instead of the last), ``"counts"`` (its texts' token counts) and ``"each"`` (each text's
    next ids); ``"texts"`` holds every text's next ids, in order."""
    n_held = min(len(texts) - 1, max(1, math.ceil(held_out * len(texts))))
    result = {"texts": []}
    for name, chosen in (("train", texts[:-n_held]), ("held_out", texts[-n_held:])):
        pieces = {"hidden": [], "next_ids": [], "own_ids": [], "later": []}
        counts = []
        for text in chosen:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            hidden = reference_hidden_states(model, ids)
            pieces["hidden"].append(hidden[:, :-1])
            pieces["later"].append(hidden[:, 1:])
            pieces["next_ids"].append(ids[0, 1:])
            pieces["own_ids"].append(ids[0, :-1])
            counts.append(ids.shape[1])
            result["texts"].append(ids[0, 1:])
        result[name] = {key: torch.cat(value, dim=1 if key in ("hidden", "later") else 0)
                        for key, value in pieces.items()}
        result[name]["counts"] = counts
    return result


def splits_differ(counts: list[int], held_out: float) -> bool:
    """Whether texts of ``counts`` tokens, split by text (the last ``ceil(held_out * n)`` held
    out), give another training part than their positions split by position, the first
    ``round(N * (1 - held_out))`` trained on: else a split by position is right by chance."""
    n_held = min(len(counts) - 1, max(1, math.ceil(held_out * len(counts))))
    positions = [count - 1 for count in counts]
    return round(sum(positions) * (1 - held_out)) != sum(positions[:-n_held])


@pytest.fixture(scope="module")
def tiny(tiny_gpt2):
    """:func:`reference_collect` of :data:`TEXTS` on the tiny GPT-2 (the last 2 held out)."""
    model, tokenizer = tiny_gpt2
    return computed_once(("ex8-collect", "tiny-gpt2"),
                         lambda: reference_collect(model, tokenizer, list(TEXTS)))


def check_collect_parts(data, what: str) -> None:
    """``data`` must be ``{"train": part, "held_out": part}``, each part a dict of the tensors
    ``"hidden"`` and ``"next_ids"``."""
    keys = f" with the keys {sorted(data, key=str)}" if isinstance(data, dict) else ""
    expect(isinstance(data, dict) and {"train", "held_out"} <= set(data), "collect-not-two-parts",
           f"{what} should be a dict with the keys 'train' and 'held_out', got "
           f"{type(data).__name__}{keys}")
    for name in ("train", "held_out"):
        part = data[name]
        expect(isinstance(part, dict) and {"hidden", "next_ids"} <= set(part),
               "collect-not-two-parts",
               f"{what}[{name!r}] should be a dict with the keys 'hidden' and 'next_ids'")
        check_tensor(part["hidden"], f"{what}[{name!r}]['hidden']")
        check_tensor(part["next_ids"], f"{what}[{name!r}]['next_ids']")


def check_collected(data, expected: dict, what: str) -> None:
    """``data`` must hold the hidden states and next ids of ``expected`` (float noise allowed);
    a kept last position, a split by position, the held-out texts taken first, a position
    paired with its own token or the first position dropped instead of the last is named."""
    check_collect_parts(data, what)
    names = ("train", "held_out")
    n_held = len(expected["held_out"]["counts"])
    n_texts = len(expected["texts"])
    tokens = sum(sum(expected[n]["counts"]) for n in names)
    ids = {n: data[n]["next_ids"].reshape(-1).long().cpu() for n in names}
    sizes = {n: (int(data[n]["hidden"].shape[1]) if data[n]["hidden"].dim() >= 2 else -1,
                 int(ids[n].shape[0])) for n in names}
    if tokens in (sum(s[0] for s in sizes.values()), sum(s[1] for s in sizes.values())):
        diagnose("collect-last-position-kept", (
            f"{what} holds {tokens} positions for {n_texts} texts of {tokens} tokens: one per "
            "token. The last position of a text has no next token to be checked against: a text "
            "of T tokens gives T - 1 positions"))
    if not torch.equal(ids["held_out"], expected["held_out"]["next_ids"]):
        first = torch.cat(expected["texts"][:n_held])
        expect(not torch.equal(ids["held_out"], first), "collect-held-out-first", (
            f"{what}: the held-out part holds the first {n_held} texts; it is the last "
            f"ceil(held_out * len(texts)) texts ({n_held} of {n_texts} here), the first ones "
            "are trained on"))
        every = torch.cat(expected["texts"])
        whole = torch.cat([ids["train"], ids["held_out"]])
        expect(not (torch.equal(whole, every) and ids["train"].shape[0]
                    != expected["train"]["next_ids"].shape[0]), "collect-split-by-position", (
            f"{what}: the training part has {ids['train'].shape[0]} positions and the held-out "
            f"part {ids['held_out'].shape[0]}: the positions were split, not the texts. Split by "
            f"text, so that no held-out text was half seen in training: the last {n_held} of "
            f"the {n_texts} texts are held out, whole"))
    for name in names:
        part, right = data[name], expected[name]
        want = right["next_ids"].shape[0]
        if not torch.equal(ids[name], right["next_ids"]):
            expect(not torch.equal(ids[name], right["own_ids"]), "collect-next-ids-not-shifted", (
                f"{what}[{name!r}]['next_ids'] are the ids of the positions themselves: position "
                "t predicts token t + 1, so it is paired with the token that follows it"))
            expect(ids[name].shape[0] == want, "collect-wrong-split", (
                f"{what}[{name!r}] has {ids[name].shape[0]} positions, expected {want}: texts of "
                f"{right['counts']} tokens give T - 1 positions each, and the last {n_held} of "
                f"the {n_texts} texts are held out"))
            pytest.fail(f"{what}[{name!r}]['next_ids'] should be each position's next token, "
                        f"{right['next_ids'][:8].tolist()}..., got {ids[name][:8].tolist()}...")
        expect(not part["hidden"].requires_grad, "collect-hidden-requires-grad",
               f"{what}[{name!r}]['hidden'] is part of an autograd graph: nothing here needs "
               "gradients; run the model where autograd records nothing")
        check_shape(part["hidden"], tuple(right["hidden"].shape), f"{what}[{name!r}]['hidden']",
                    "(n_layers + 1, N, d_model): every hidden state of every position but each "
                    "text's last")
        states = part["hidden"].detach().float().cpu()
        if not torch.allclose(states, right["hidden"], atol=1e-4, rtol=1e-4):
            expect(not torch.allclose(states, right["later"], atol=1e-4, rtol=1e-4),
                   "collect-first-position-dropped", (
                       f"{what}[{name!r}]['hidden'] are the states of positions 1 .. T - 1: the "
                       "position whose states have no next token to predict is the last one, "
                       "T - 1; keep positions 0 .. T - 2"))
            pytest.fail(f"{what}[{name!r}]['hidden'] differs from the model's hidden states by up "
                        f"to {(states - right['hidden']).abs().max().item():.3g}: run each text "
                        "once and keep every hidden state of positions 0 .. T - 2")


# ----------------------------------------------------------------------------- translators


@pytest.fixture(scope="module")
def lens_inputs():
    """The small GPT-2 (random final norm), real hidden states of it ``(n_layers + 1, N,
    d_model)``, a held-out part of collect's form, zero translators and random ones."""
    model = small_model()

    def compute():
        generator = torch.Generator().manual_seed(21)
        part = made_data(model, generator, texts=3, held=1)["held_out"]
        return {"part": part, "hidden": part["hidden"],
                "random": random_translators(model, generator), "zeros": zero_translators(model)}

    return {"model": model, **computed_once(("ex8-lens-inputs", SMALL_SEED), compute)}


def check_translators(translators, model, what: str) -> None:
    """``translators`` must be ``{"A": [n_layers zeros (d, d)], "b": [n_layers zeros (d,)]}``,
    float32; the identity matrix, a random start, a translator for the last hidden state and a
    module or a stacked tensor instead of lists of tensors are named."""
    n_layers, d_model, _ = sizes_of(model)
    check_plain(translators, what, "translators-not-plain-data")
    expect(isinstance(translators, dict) and {"A", "b"} <= set(translators),
           "translators-not-plain-data",
           f"{what} should be a dict with the lists 'A' and 'b', got {type(translators).__name__}")
    for name, shape in (("A", (d_model, d_model)), ("b", (d_model,))):
        tensors = translators[name]
        expect(isinstance(tensors, (list, tuple))
               and all(isinstance(x, torch.Tensor) for x in tensors), "translators-not-lists", (
                   f"{what}[{name!r}] should be a list of tensors, one per hidden state but the "
                   f"last, got {type(tensors).__name__}"
                   + (f" of shape {tuple(tensors.shape)}" if isinstance(tensors, torch.Tensor)
                      else "")))
        expect(len(tensors) != n_layers + 1, "translators-for-the-last-layer", (
            f"{what}[{name!r}] has {n_layers + 1} translators for a model of {n_layers} blocks: "
            "the last hidden state is the model's output, already normed, with nothing to "
            f"translate; one translator for each of the hidden states 0 .. {n_layers - 1}"))
        expect(len(tensors) == n_layers, "translators-wrong-shape",
               f"{what}[{name!r}] holds {len(tensors)} tensors, expected {n_layers}: one per "
               "hidden state but the last")
        for tensor in tensors:
            check_shape(tensor, shape, f"each of {what}[{name!r}]",
                        "d_model x d_model for A, d_model for b", "translators-wrong-shape")
            expect(tensor.dtype == torch.float32, "translators-wrong-shape",
                   f"{what}[{name!r}] should hold float32 tensors, got {tensor.dtype}")
    A = torch.stack([a.detach().cpu() for a in translators["A"]])
    b = torch.stack([v.detach().cpu() for v in translators["b"]])
    eye = torch.eye(d_model).expand(n_layers, -1, -1)
    expect(not torch.equal(A, eye), "translators-identity-matrix", (
        f"{what}['A'] holds identity matrices: the translator is h + A h + b, which already adds "
        "h, so A = I gives 2h. The identity translator has A = 0 and b = 0"))
    if not (torch.equal(A, torch.zeros_like(A)) and torch.equal(b, torch.zeros_like(b))):
        diagnose("translators-not-zero", (
            f"{what} does not start at zero (largest |A| {A.abs().max().item():.3g}, largest "
            f"|b| {b.abs().max().item():.3g}): with A = 0 and b = 0 every translator is the "
            "identity, exactly, so the untrained tuned lens is the logit lens; a random start "
            "(such as nn.Linear's) reads noise from the first step"))


# ----------------------------------------------------------------------------- translate


def check_translated(result, A, b, hidden, layer: int, what: str) -> None:
    """``result`` must be ``hidden + hidden @ A[layer].T + b[layer]``; without the residual,
    with ``A`` transposed, doubled, or with another layer's translator is named."""
    check_tensor(result, "translate")
    got = result.detach().double().cpu()
    expected = reference_translate(A, b, hidden, layer).double()
    if got.shape == expected.shape and torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
        return
    check_shape(got, tuple(expected.shape), what, "the shape of hidden: (..., d_model)")

    def near(other) -> bool:
        return torch.allclose(got, other.double(), atol=1e-5, rtol=1e-5)

    if near(reference_translate(A, b, hidden, layer, residual=False)):
        diagnose("translate-without-residual", (
            f"{what} is A h + b without h itself: the translator is h + A h + b, so that A = 0, "
            "b = 0 leaves h as it is (the identity) and training learns only a correction"))
    if near(reference_translate(A, b, hidden, layer) + hidden):
        diagnose("translate-doubles", (
            f"{what} is h + (I + A) h + b: the identity was added twice (h + I h = 2h). Either "
            "add h back to A h + b, or multiply by I + A, not both"))
    if near(reference_translate(A, b, hidden, layer, transpose=False)):
        diagnose("translate-a-transposed", (
            f"{what} multiplies h by A on the wrong side (h @ A instead of h @ A.T): A is read "
            "as nn.Linear reads its weight, row j of A makes entry j of the result"))
    others = [k for k in range(len(A)) if k != layer
              and near(reference_translate(A, b, hidden, k))]
    expect(not others, "translate-wrong-layer", (
        f"{what} used translator {others[:1]} for hidden state {layer}: translator i belongs "
        f"to hidden state i (a negative layer counts from the end of the {len(A)} "
        "translators)"))
    pytest.fail(f"{what} should be h + h @ A[layer].T + b[layer]; largest difference "
                f"{(got - expected).abs().max().item():.3g}")


# ----------------------------------------------------------------------------- the lens


def check_lens(result, model, A, b, hidden, layer: int, what: str) -> None:
    """``result`` must be the tuned lens's log-probabilities of ``hidden`` at ``layer``; the norm
    skipped, the last hidden state normed, translated after the norm, translators ignored and
    raw logits or probabilities are named."""
    n_layers, _, vocab = sizes_of(model)
    check_tensor(result, "lens_log_probs")
    got = result.detach().double().cpu()
    expected = reference_lens(model, A, b, hidden, layer).double()
    if got.shape == expected.shape and torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
        return
    check_shape(got, tuple(expected.shape), what,
                f"the shape of hidden with the last dimension the vocabulary's ({vocab})")

    def near(other) -> bool:
        return torch.allclose(got, other.double(), atol=1e-4, rtol=1e-4)

    totals = got.exp().sum(-1)
    if not torch.allclose(totals, torch.ones_like(totals), atol=1e-3):
        if near(expected.exp()):
            diagnose("tuned-lens-not-log-probs", f"{what} holds probabilities (a softmax): the "
                     "lens gives log-probabilities, a log-softmax over the vocabulary")
        if torch.allclose(got - got.logsumexp(-1, keepdim=True), expected, atol=1e-4, rtol=1e-4):
            diagnose("tuned-lens-not-log-probs", f"{what} holds the unembedding's raw logits: "
                     "normalise them over the vocabulary with a log-softmax")
    if layer == n_layers:
        expect(not near(reference_lens(model, A, b, hidden, layer, norm_last=True)),
               "tuned-lens-last-layer-normed", (
                   f"{what}: the last hidden state went through the final norm again: the model "
                   "already normed it, so it goes straight to the unembedding (and has no "
                   "translator)"))
    else:
        expect(not near(reference_lens(model, A, b, hidden, layer, norm=False)),
               "tuned-lens-norm-skipped", (
                   f"{what} skipped the final norm: every hidden state but the last is read as "
                   "the model reads its last one, through kata.final_norm(model), after the "
                   "translator"))
        expect(not near(reference_lens(model, A, b, hidden, layer, translate_first=False)),
               "tuned-lens-translator-after-norm", (
                   f"{what} applied the translator after the final norm: the translator "
                   "re-expresses the hidden state itself, then the norm and the unembedding "
                   "read it"))
        zeros_A, zeros_b = zeros_like_translators(A, b)
        if any(bool(x.abs().max() > 0) for x in [*A, *b]):
            expect(not near(reference_lens(model, zeros_A, zeros_b, hidden, layer)),
                   "tuned-lens-ignores-translators", (
                       f"{what} is the logit lens: the translator of hidden state {layer} was "
                       "not applied before the norm"))
    pytest.fail(f"{what} differs from the tuned lens (translator, final norm, unembedding, "
                f"log-softmax) by up to {(got - expected).abs().max().item():.3g}")


def call_lens(ex, model, translators, hidden, layer: int):
    """Your ``lens_log_probs`` on copies; an IndexError for the last hidden state (which has no
    translator) is named."""
    n_layers = len(kata.blocks(model))
    try:
        return ex.lens_log_probs(model, copied(translators), hidden.clone(), layer)
    except IndexError as error:
        if layer % (n_layers + 1) != n_layers:
            raise
        diagnose("tuned-lens-last-layer-translated", (
            f"lens_log_probs at the last hidden state ({layer}) raised IndexError ({error}): "
            "the last hidden state has no translator; it is read as the model reads it, "
            "straight into the unembedding"))


# ----------------------------------------------------------------------------- KL


#: Two positions over a vocabulary of 5: the final distribution is peaked, the lens broad, so
#: that the two directions of the KL differ (1.572 for KL(final || lens), 2.822 the other way).
FINAL_ROWS = [[6.0, 1.0, 0.0, -1.0, -2.0], [0.0, 4.0, 0.5, 0.0, -3.0]]
LENS_ROWS = [[0.5, 0.4, 0.3, 0.2, 0.1], [1.0, 0.0, 0.0, 1.0, 0.0]]


def hand_made_distributions() -> tuple[torch.Tensor, torch.Tensor]:
    """``(lens, final)`` log-probabilities ``(2, 5)`` (see :data:`FINAL_ROWS`)."""
    return (torch.log_softmax(torch.tensor(LENS_ROWS), -1),
            torch.log_softmax(torch.tensor(FINAL_ROWS), -1))


def check_kl(value, lens, final, what: str) -> None:
    """``value`` must be KL(final || lens) averaged over the positions; the other direction, a
    mean over the vocabulary too, a sum over the positions, the cross-entropy without the
    entropy and a target read as probabilities are named."""
    check_tensor(value, "kl_to_final")
    expect(value.numel() == 1, "kl-not-one-number",
           f"{what} has shape {tuple(value.shape)}: the loss is one number, a 0-d tensor")
    got = float(value.detach().double().reshape(-1)[0])
    expected = float(reference_kl(lens, final))
    if math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5):
        return
    vocab, positions = lens.shape[-1], lens.reshape(-1, lens.shape[-1]).shape[0]
    expect(not math.isnan(got), "kl-log-target-missing", (
        f"{what} is NaN: the final distribution was read as probabilities while it holds "
        "log-probabilities (negative numbers, whose logarithm is NaN); tell F.kl_div that the "
        "target is in log space (log_target=True)"))

    def near(other) -> bool:
        return math.isclose(got, float(other), rel_tol=1e-4, abs_tol=1e-5)

    expect(not near(reference_kl(final, lens)), "kl-wrong-direction", (
        f"{what} is {got:.4g}, KL(lens || final), the other direction ({expected:.4g} is KL(final "
        "|| lens)): the expectation is taken under the model's final distribution, so the lens "
        "pays where the model puts its mass. F.kl_div(input, target) computes KL(target || "
        "input): the lens is the input"))
    expect(not near(expected / vocab), "kl-mean-over-vocabulary", (
        f"{what} is {got:.4g}, the KL divided by the vocabulary's {vocab} tokens too: sum over "
        "the vocabulary, average over the positions only (F.kl_div's reduction='batchmean', not "
        "'mean')"))
    expect(not near(expected * positions), "kl-summed-over-positions", (
        f"{what} is {got:.4g}, the sum over the {positions} positions: average them, so that "
        "the loss does not grow with the number of tokens a step reads"))
    cross_entropy = float(-(final.double().exp() * lens.double()).sum(-1).mean())
    expect(not near(cross_entropy), "kl-cross-entropy-not-kl", (
        f"{what} is {got:.4g}, the cross-entropy of the lens under the final distribution: the "
        "KL subtracts the final distribution's own entropy, so that it is 0 when the lens "
        "equals the model's output"))
    pytest.fail(f"{what} should be KL(final || lens) = {expected:.6g}, got {got:.6g}")


# ----------------------------------------------------------------------------- training

#: What the training tests ask for: layers, steps, tokens a step, learning rate, seed.
RUN = {"layers": [0, 2], "steps": 4, "tokens_per_step": 8, "lr": 0.01, "seed": 3}
STATE_KEYS = ("A", "b", "layers", "steps_done", "losses", "optimizer")


@pytest.fixture(scope="module")
def small(tiny_gpt2):
    """The small GPT-2's data and the reference runs the training tests compare with:
    ``{"data", "fresh", "run", "two", "restarted", "again", "held_out", "both"}``, the runs
    ``{"A", "b", "losses"}`` (tiny_gpt2 only makes the tests share the session's start)."""

    def compute():
        model = small_model()
        data = made_data(model, torch.Generator().manual_seed(11))
        fresh = zero_translators(model)
        args = (RUN["layers"], RUN["steps"], RUN["tokens_per_step"], RUN["lr"], RUN["seed"])
        return {
            "data": data, "fresh": fresh,
            "run": reference_training(model, fresh, data, *args),
            "two": reference_training(model, fresh, data, RUN["layers"], 2, *args[2:]),
            "restarted": reference_training(model, fresh, data, *args, restart_adam_at=2),
            "again": reference_training(model, fresh, data, *args, start_again_at=2),
            "held_out": reference_training(model, fresh, data, *args, part="held_out"),
            "all": reference_training(model, fresh, data, list(range(len(kata.blocks(model)))),
                                      2, *args[2:]),
            "both": reference_training(model, fresh, data, *args, part="both"),
        }

    return computed_once(("ex8-small-runs", SMALL_SEED), compute)


def poisoned(data: dict) -> dict:
    """A copy of ``data`` whose held-out hidden states are all NaN: a run that reads them gives
    NaN translators; one that reads the training part only cannot tell the difference."""
    data = copied(data)
    data["held_out"]["hidden"] = torch.full_like(data["held_out"]["hidden"], float("nan"))
    return data


def call_train(ex, model, translators, data, **options):
    """Your ``train_tuned_lens`` on copies of the inputs, quietly (no progress bar)."""
    arguments = {key: RUN[key] for key in ("layers", "steps", "tokens_per_step", "lr", "seed")}
    arguments.update(options)
    return ex.train_tuned_lens(model, copied(translators), copied(data), progress=False,
                               **arguments)


def check_state(state, model, what: str, layers=None, steps_done=None) -> None:
    """``state`` must be the dict the contract names, of plain data: A and b of the translators'
    shapes, the trained layers sorted, the steps done, one float loss per step, Adam's state."""
    n_layers, d_model, _ = sizes_of(model)
    check_plain(state, "train_tuned_lens", "tuned-state-not-plain-data")
    keys = sorted(state, key=str) if isinstance(state, dict) else None
    expect(isinstance(state, dict) and set(STATE_KEYS) <= set(state), "tuned-state-keys-missing",
           f"{what} should be a dict with the keys {list(STATE_KEYS)}, got "
           f"{type(state).__name__}{' with keys ' + str(keys) if keys else ''}")
    check_translator_tensors(state, what, n_layers)
    for name, shape in (("A", (d_model, d_model)), ("b", (d_model,))):
        for tensor in state[name]:
            check_shape(tensor, shape, f"each of {what}[{name!r}]", "as make_translators gives them")
        expect(not any(tensor.requires_grad for tensor in state[name]), "tuned-state-not-detached", (
            f"{what}[{name!r}] holds tensors of an autograd graph: return the translators "
            "detached, plain numbers that the next call trains again"))
    done = state["steps_done"]
    expect(isinstance(done, int) and not isinstance(done, bool), "tuned-state-keys-missing",
           f"{what}['steps_done'] should be an int, got {type(done).__name__} {done!r}")
    losses = state["losses"]
    expect(isinstance(losses, list) and all(isinstance(v, float) for v in losses)
           and len(losses) == done, "tuned-losses-not-one-per-step", (
               f"{what}['losses'] should be a list of {done} floats, one loss per step done "
               f"(loss.item()), got {type(losses).__name__} of "
               f"{len(losses) if hasattr(losses, '__len__') else '?'}"))
    if layers is not None:
        expect(list(state["layers"]) == sorted(set(layers)), "tuned-state-keys-missing",
               f"{what}['layers'] should be the trained hidden states, sorted: "
               f"{sorted(set(layers))}, got {state['layers']!r}")
    if steps_done is not None:
        expect(done == steps_done, "tuned-steps-done-wrong",
               f"{what}['steps_done'] is {done}, expected {steps_done}")


def check_translator_tensors(state, what: str, n_layers: int) -> None:
    """``state`` must at least be a dict holding ``"A"`` and ``"b"``, each a list of
    ``n_layers`` tensors."""
    expect(isinstance(state, dict) and {"A", "b"} <= set(state), "tuned-state-keys-missing",
           f"{what} should be a dict with the keys {list(STATE_KEYS)}, got {type(state).__name__}")
    for name in ("A", "b"):
        tensors = state[name]
        expect(isinstance(tensors, (list, tuple)) and len(tensors) == n_layers
               and all(isinstance(x, torch.Tensor) for x in tensors), "tuned-state-keys-missing",
               f"{what}[{name!r}] should be a list of {n_layers} tensors, as make_translators "
               f"gives them, got {type(tensors).__name__}")


def stacked(tensors) -> torch.Tensor:
    return torch.stack([x.detach().float().cpu() for x in tensors])


def close_translators(state, expected: dict, lr: float = RUN["lr"],
                      steps: int = RUN["steps"]) -> bool:
    """Whether ``state``'s A and b are ``expected``'s, as far as Adam lets two correct
    implementations agree.

    Adam's first step moves every number by the learning rate, in the direction of its
    gradient's sign; a number whose gradient is near 0 gets the sign of float noise, which
    another (correct) order of summation may flip. So: every number within 1e-5 of the
    expected one (and 1e-4 of its size) but a few (at most 0.5%, and 1 in any case), and those
    few within the most a flip can change, ``2 * lr * steps``. A wrong run (another batch, a new
    Adam, another learning rate) moves most numbers elsewhere."""
    for name in ("A", "b"):
        got, want = stacked(state[name]), stacked(expected[name])
        if got.shape != want.shape:
            return False
        difference = (got - want).abs()
        off = difference > 1e-5 + 1e-4 * want.abs()
        if int(off.sum()) > max(1, 0.005 * off.numel()) or not bool(
                (difference <= 2 * lr * steps + 1e-5).all()):
            return False
    return True


def check_trained(state, expected: dict, wrong: dict, fresh: dict, layers: list[int],
                  what: str, lr: float = RUN["lr"], steps: int = RUN["steps"]) -> None:
    """``state``'s translators must be ``expected``'s; ``wrong`` maps a diagnosis to a run it
    would give (the held-out part trained on...). Untrained layers moved, nothing trained, NaN
    and the losses of another sum are named."""
    A, b = stacked(state["A"]), stacked(state["b"])
    fresh_A, fresh_b = stacked(fresh["A"]), stacked(fresh["b"])
    expect(bool(torch.isfinite(A).all() and torch.isfinite(b).all()), "tuned-trained-on-held-out",
           (f"{what} gave translators with NaN or infinite numbers, although the training part "
            "is all finite (this test fills the held-out part's hidden states with NaN): train "
            "on data['train'] only; the held-out part is for judging the lens"))
    if not close_translators(state, expected, lr, steps):
        for diagnosis, (run, sentence) in wrong.items():
            if close_translators(state, run, lr, steps):
                diagnose(diagnosis, f"{what}: {sentence}")
        others = [k for k in range(A.shape[0]) if k not in layers
                  and not (torch.equal(A[k], fresh_A[k]) and torch.equal(b[k], fresh_b[k]))]
        expect(not others, "tuned-other-layers-moved", (
            f"{what} changed the translators of hidden states {others}, which were not asked "
            f"for (layers={layers}): train only the chosen layers, and leave the others as they "
            "were given"))
        untouched = [k for k in layers
                     if torch.equal(A[k], fresh_A[k]) and torch.equal(b[k], fresh_b[k])]
        expect(not untouched, "tuned-nothing-trained", (
            f"{what} left the translators of hidden states {untouched} as they were: each step "
            "must move every chosen layer's A and b (one Adam step on the summed loss)"))
        # Adam hardly minds a loss divided by the number of layers, but its eps does when the
        # gradients are tiny: the translators then differ a little, the losses tell why
        check_losses_summed(state, expected, layers, what)
        worst = max((A - stacked(expected["A"])).abs().max().item(),
                    (b - stacked(expected["b"])).abs().max().item())
        pytest.fail(f"{what}: the translators differ from Adam's on the given batches by up to "
                    f"{worst:.3g}. Step s reads the positions _batch_positions(N, "
                    "tokens_per_step, seed, s) draws, the model's final log-probabilities from "
                    "the last hidden state there, and the loss is the sum over the trained "
                    "layers of kl_to_final; one Adam step (lr) each")
    losses, right = check_losses_summed(state, expected, layers, what)
    if losses is not None and not np.allclose(losses, right, rtol=1e-3, atol=1e-6):
        pytest.fail(f"{what}: the losses should be {np.round(right, 5).tolist()}, got "
                    f"{np.round(losses, 5).tolist()}")


def check_losses_summed(state, expected: dict, layers: list[int], what: str):
    """Names losses that are the mean over the trained layers rather than their sum; returns
    ``(losses, expected losses)`` as float64 arrays, ``(None, None)`` when the losses are not
    numbers one per expected step."""
    try:
        losses = np.asarray(state["losses"], dtype=np.float64)
    except (TypeError, ValueError, KeyError):
        return None, None
    right = np.asarray(expected["losses"], dtype=np.float64)
    if losses.shape != right.shape:
        return None, None
    if not np.allclose(losses, right, rtol=1e-3, atol=1e-6):
        expect(not np.allclose(losses * len(layers), right, rtol=1e-3, atol=1e-6),
               "tuned-loss-not-summed-over-layers", (
                   f"{what}: the losses are the mean over the {len(layers)} trained layers: a "
                   "step's loss is their sum (Adam hardly minds, the numbers you watch do)"))
    return losses, right


def trained_wrong_runs(runs: dict) -> dict:
    """diagnosis -> (a wrong run of :func:`small`'s, what it says)."""
    return {"tuned-trained-on-held-out": (
        runs["held_out"], "these are the translators Adam gives on the held-out part: train on "
        "data['train'] only; the held-out part is for judging the lens"),
        "tuned-trained-on-both-parts": (
            runs["both"], "these are the translators Adam gives on both parts put together: "
            "train on data['train'] only; the held-out part is for judging the lens")}


def resumed_wrong_runs(runs: dict, first: int) -> dict:
    """diagnosis -> (a wrong resumed run, what it says): ``runs["restarted"]`` started a new
    Adam at step ``first``, ``runs["again"]`` ran the steps 0, 1, ... again after ``first``."""
    return {"tuned-resume-restarts-adam": (
        runs["restarted"], f"resumed after {first} steps, training goes on as a new Adam would "
        "(its moments at zero, its step count at 1): keep the optimizer's state in the result "
        "(state_dict()) and load it when resuming"),
        "tuned-resume-ignores-steps-done": (
            runs["again"], f"resumed after {first} steps, training ran steps 0, 1, ... again: a "
            "resumed run goes on from the steps it has done, up to `steps` in all")}


def grads_left(model) -> list[str]:
    return [name for name, parameter in model.named_parameters() if parameter.grad is not None]


def clear_grads(model) -> None:
    for parameter in model.parameters():
        parameter.grad = None


def same_state(a, b) -> bool:
    """Whether two plain values are equal, tensors to the last bit."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and a.dtype == b.dtype
                and bool(torch.equal(a.detach().cpu(), b.detach().cpu())))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a)
                      and math.isnan(b))


# ----------------------------------------------------------------------------- ranks


def check_ranks(ranks, model, translators, part, what: str, lens=None) -> None:
    """``ranks`` must be each hidden state's rank of the true next token under the lens of
    ``translators`` (ties either way); counted from 1 and the logit lens instead of the tuned
    lens are named. ``lens(hidden, layer)``, your ``lens_log_probs`` with these translators
    (public tests only), tells which of your functions lost the translators."""
    n_layers = len(kata.blocks(model))
    check_tensor(ranks, "next_token_ranks", "ranks are counts, in a tensor")
    n_positions = part["next_ids"].shape[0]
    check_shape(ranks, (n_layers + 1, n_positions), what,
                "(n_layers + 1, N): one rank per hidden state and position")
    expect(ranks.dtype == torch.int64, "lens-ranks-not-int64",
           f"{what} is {ranks.dtype}: ranks are counts, int64")
    ranks = ranks.cpu()
    bounds = reference_rank_bounds(model, translators, part)
    if within(ranks, bounds):
        return
    expect(not within(ranks, bounds, shift=1), "lens-ranks-one-based", (
        f"{what}: every rank is one too high: ranks count the tokens with a strictly higher "
        "log-probability, so the top token has rank 0"))
    if lens is not None and within(ranks, reference_rank_bounds(model, translators, part,
                                                                 translated=False)):
        first = reference_lens(model, *zeros_like_translators(translators["A"], translators["b"]),
                               part["hidden"][0], 0)
        yours = lens(part["hidden"][0], 0)
        expect(not (isinstance(yours, torch.Tensor) and yours.shape == first.shape
                    and torch.allclose(yours.detach().float().cpu(), first, atol=1e-4)),
               "tuned-lens-ignores-translators", (
                   f"{what} are the logit lens's ranks, and your lens_log_probs with these "
                   "translators gives the logit lens too: apply each hidden state's translator "
                   "before the norm"))
    expect(not within(ranks, reference_rank_bounds(model, translators, part, translated=False)),
           "lens-ranks-ignore-translators", (
               f"{what} are the logit lens's ranks: read each hidden state with lens_log_probs "
               "and these translators"))
    low, _ = bounds
    bad = (ranks < bounds[0]) | (ranks > bounds[1])
    layer, position = bad.nonzero()[0].tolist()
    pytest.fail(f"{what} is wrong in {int(bad.sum())} of {ranks.numel()} places; e.g. hidden "
                f"state {layer}, position {position}: expected {int(low[layer, position])}, got "
                f"{int(ranks[layer, position])} (the rank of part['next_ids'][{position}])")


# ----------------------------------------------------------------------------- the figure


def layer_names(n: int) -> list[str]:
    return ["Emb"] + [f"L{i}" for i in range(n - 1)]


def printable_ids(tokenizer, vocab_size: int) -> list[int]:
    """The ids from 256 on (merges) whose text is not blank and draws as it is (no '$')."""
    return [i for i in range(256, vocab_size)
            if tokenizer.decode([i]).strip() and "$" not in tokenizer.decode([i])]


def random_figure_inputs(generator: torch.Generator, tokenizer, n_hidden: int, positions: int,
                         vocab: int) -> dict:
    """Ranks of two lenses ``(n_hidden, positions)`` and one position's rows ``(n_hidden,
    vocab)`` whose top tokens are printable merges."""
    logit = torch.randint(0, 5000, (n_hidden, positions), generator=generator)
    tuned = torch.randint(0, 500, (n_hidden, positions), generator=generator)
    allowed = torch.tensor(printable_ids(tokenizer, vocab))
    mask = torch.full((vocab,), -100.0)
    mask[allowed] = 0.0
    rows = [torch.log_softmax(torch.randn(n_hidden, vocab, generator=generator) * 2 + mask, -1)
            for _ in range(2)]
    return {"logit_ranks": logit, "tuned_ranks": tuned, "logit_row": rows[0], "tuned_row": rows[1]}


def shown_layers(n_hidden: int, layers) -> list[int]:
    trained = range(n_hidden - 1) if layers is None else layers
    return sorted({layer % n_hidden for layer in trained} | {n_hidden - 1})


def _lines_of(ax) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    found = {}
    for line in ax.get_lines():
        label = str(line.get_label()).lower()
        for name in ("logit", "tuned"):
            if name in label and name not in found:
                found[name] = (np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float))
    return found


def _medians(ranks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(torch's lower median + 1, numpy's median + 1, mean + 1) per hidden state."""
    r = torch.as_tensor(ranks).float()
    return (r.median(dim=1).values.numpy() + 1, np.median(r.numpy(), axis=1) + 1,
            r.mean(dim=1).numpy() + 1)


def check_curves(fig, inputs: dict, layers, what: str):
    """The left panel: a log y axis, the logit lens's line at every hidden state and the tuned
    lens's at the drawn ones, each the median rank + 1."""
    expect(isinstance(fig, Figure), "tuned-plot-not-a-figure",
           f"plot_tuned_lens should return a matplotlib Figure, got {type(fig).__name__}")
    n_hidden = inputs["logit_ranks"].shape[0]
    shown = shown_layers(n_hidden, layers)
    candidates = [ax for ax in fig.axes if _lines_of(ax)]
    expect(candidates, "tuned-plot-lines-unlabelled", (
        f"{what}: no line labelled with 'logit' or 'tuned': draw the two lenses' median ranks as "
        "lines labelled 'logit lens' and 'tuned lens', with a legend"))
    ax = candidates[0]
    lines = _lines_of(ax)
    expect(set(lines) == {"logit", "tuned"}, "tuned-plot-lines-unlabelled", (
        f"{what}: found a line for {sorted(lines)} only: label the two lines 'logit lens' and "
        "'tuned lens'"))
    expect(ax.get_yscale() == "log", "tuned-plot-not-log-scale", (
        f"{what}: the y axis is {ax.get_yscale()!r}: ranks run from 0 to the vocabulary's size, "
        "draw them on a logarithmic axis"))
    expect(ax.get_legend() is not None, "tuned-plot-lines-unlabelled",
           f"{what}: add a legend naming the two lenses")
    for name, ranks, xs in (("logit", inputs["logit_ranks"], list(range(n_hidden))),
                            ("tuned", inputs["tuned_ranks"], shown)):
        x, y = lines[name]
        if name == "tuned" and len(shown) < n_hidden and np.array_equal(x, np.arange(n_hidden)):
            diagnose("tuned-plot-untrained-layers-drawn", (
                f"{what}: the tuned lens is drawn at all {n_hidden} hidden states, but it was "
                f"trained at {shown[:-1]} only: elsewhere its translators are the identity and "
                "it is the logit lens again. Draw it at the trained layers and the last one"))
        expect(np.array_equal(x, np.asarray(xs, float)), "tuned-plot-wrong-layers", (
            f"{what}: the {name} lens's line should have x = {xs}, got {x.tolist()}"))
        lower, middle, mean = (m[xs] for m in _medians(ranks))
        if np.allclose(y, lower) or np.allclose(y, middle):
            continue
        expect(not (np.allclose(y, lower - 1) or np.allclose(y, middle - 1)),
               "tuned-plot-zero-on-log-axis", (
                   f"{what}: the {name} lens's line is the median rank itself: a log axis cannot "
                   "show rank 0 (the top token), so draw median + 1"))
        expect(not np.allclose(y, mean), "tuned-plot-mean-not-median", (
            f"{what}: the {name} lens's line is the mean rank: a few badly ranked tokens drag "
            "the mean up; draw the median"))
        pytest.fail(f"{what}: the {name} lens's line should be its median rank + 1 at each drawn "
                    f"hidden state, {lower.tolist()}, got {y.tolist()}")
    return ax


def check_cells(fig, inputs: dict, tokenizer, layers, what: str) -> None:
    """The right panel: one row per drawn layer (the first at the bottom), the two lenses as
    columns, each cell the top log-probability with its token written in it."""
    expect(isinstance(fig, Figure), "tuned-plot-not-a-figure",
           f"plot_tuned_lens should return a matplotlib Figure, got {type(fig).__name__}")
    n_hidden = inputs["logit_ranks"].shape[0]
    shown = shown_layers(n_hidden, layers)
    rows = torch.stack([inputs["logit_row"][shown], inputs["tuned_row"][shown]], dim=1)
    top = rows.max(dim=-1)  # (len(shown), 2)
    axes = heatmap_axes(fig)
    expect(axes, "tuned-plot-no-cells", (
        f"{what}: no image of the top tokens: draw the top log-probability of each drawn layer "
        "under each lens as an image (imshow), two columns, one row per layer"))
    ax = axes[0]
    heatmap = drawn_heatmaps(ax)[0]
    expected = top.values.numpy()
    if heatmap.values.shape == expected.T.shape != expected.shape:
        diagnose("tuned-plot-cells-transposed", (
            f"{what}: the image has the lenses as rows ({heatmap.values.shape}): one row per drawn "
            f"layer ({len(shown)}), the two lenses as its columns"))
    expect(heatmap.values.shape == expected.shape, "tuned-plot-cells-wrong", (
        f"{what}: the image should be (drawn layers, 2) = {expected.shape}, got "
        f"{heatmap.values.shape}; the drawn layers are {shown}"))
    expect(np.allclose(heatmap.values, expected, atol=1e-4), "tuned-plot-cells-wrong", (
        f"{what}: each cell should be the top log-probability (the maximum over the vocabulary) "
        "of that layer's row under that lens"))
    expect(heatmap.rows_up, "tuned-plot-output-at-bottom", (
        f"{what}: the output (the last hidden state) is the bottom row: an image puts row 0 at "
        "the top unless told otherwise; put the first drawn layer at the bottom"))
    texts = {}
    for text in ax.texts:
        x, y = text.get_position()
        cell = heatmap.cell_at(float(x), float(y))
        if cell is not None:
            texts[cell] = text.get_text().strip()
    for i, layer in enumerate(shown):
        for j, lens in enumerate(("logit", "tuned")):
            want = tokenizer.decode([int(top.indices[i, j])]).strip()
            got = texts.get((i, j), "")
            expect(got and want.startswith(got) and len(got) >= min(4, len(want)),
                   "tuned-plot-cell-texts-wrong", (
                       f"{what}: the {lens} lens's cell of hidden state {layer} should show its "
                       f"top token {want!r}, got {got!r}"))
    labels = [label.get_text() for label in ax.get_yticklabels()]
    names = layer_names(n_hidden)
    expect(labels == [names[layer] for layer in shown], "tuned-plot-cells-wrong", (
        f"{what}: the image's rows should be labelled {[names[layer] for layer in shown]}, got "
        f"{labels}"))
    expect(len(fig.axes) >= 3, "tuned-plot-cells-wrong",
           f"{what}: add a colorbar so that the cells' colours can be read")
