"""Correct variants of exercise 8's functions that the tests must accept."""

from course.shared.catalogue import Variant

VARIANTS = [
    Variant(
        id="w-form-einsum-and-hand-written-log-softmax",
        exercise="ex8",
        summary="stores W = I + A as the paper's other form does when translating, unembeds with "
                "einsum and writes the log-softmax as logits minus their logsumexp",
        code='''
def make_translators(model):
    weight = model.get_output_embeddings().weight
    n, d = len(kata.blocks(model)), weight.shape[1]
    return {"A": list(weight.new_zeros(n, d, d)), "b": list(weight.new_zeros(n, d))}


def translate(translators, hidden, layer):
    n = len(translators["A"])
    if not -n <= layer < n:
        raise IndexError(f"layer {layer} has no translator: the valid range is -{n}..{n - 1}")
    W = torch.eye(hidden.shape[-1]) + translators["A"][layer]
    return torch.einsum("...i,ji->...j", hidden, W) + translators["b"][layer]


def lens_log_probs(model, translators, hidden, layer):
    n = len(kata.blocks(model)) + 1
    if not -n <= layer < n:
        raise IndexError(f"layer {layer} is out of range: the valid range is -{n}..{n - 1}")
    layer %= n
    h = hidden if layer == n - 1 else kata.final_norm(model)(translate(translators, hidden, layer))
    logits = torch.einsum("...d,vd->...v", h, model.get_output_embeddings().weight)
    return logits - logits.logsumexp(dim=-1, keepdim=True)
''',
    ),
    Variant(
        id="hand-written-kl",
        exercise="ex8",
        summary="writes KL(final || lens) out as p_final * (log p_final - log p_lens), summed "
                "over the vocabulary and averaged over the flattened positions",
        code='''
def kl_to_final(lens_log_probs, final_log_probs):
    if lens_log_probs.shape != final_log_probs.shape:
        raise ValueError(f"shapes {tuple(lens_log_probs.shape)} and {tuple(final_log_probs.shape)}")
    p = final_log_probs.exp()
    return (p * (final_log_probs - lens_log_probs)).sum(dim=-1).flatten().mean()
''',
    ),
    Variant(
        id="freeze-backward-and-stacked-adam",
        exercise="ex8",
        summary="freezes the model during training (restoring every flag in a finally block), "
                "calls loss.backward() and lets one Adam move the whole stacked A and b",
        code='''
def train_tuned_lens(model, translators, data, layers=None, steps=200, tokens_per_step=32,
                     lr=3e-3, seed=0, progress=True):
    n = len(translators["A"])
    wanted = list(range(n)) if layers is None else [kata.layer_index(l, n, "layer") for l in layers]
    wanted = sorted(set(wanted))
    if not wanted:
        raise ValueError("no layers to train")
    if tokens_per_step < 1:
        raise ValueError("tokens_per_step must be at least 1")
    start = translators.get("steps_done", 0)
    if start and translators["layers"] != wanted:
        raise ValueError("resume with the layers the run started with")
    A = torch.stack(translators["A"]).detach().clone().requires_grad_(True)
    b = torch.stack(translators["b"]).detach().clone().requires_grad_(True)
    optimizer = torch.optim.Adam([A, b], lr=lr)
    if translators.get("optimizer") is not None:
        optimizer.load_state_dict(copy.deepcopy(translators["optimizer"]))
    hidden = data["train"]["hidden"]
    losses = list(translators.get("losses", []))
    flags = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)
    done = start
    try:
        for step in tqdm(range(start, steps), disable=not progress):
            where = _batch_positions(hidden.shape[1], tokens_per_step, seed, step)
            with torch.no_grad():
                final = lens_log_probs(model, {"A": A, "b": b}, hidden[n, where], n)
            loss = 0
            for l in wanted:
                lens = lens_log_probs(model, {"A": A, "b": b}, hidden[l, where], l)
                loss = loss + kl_to_final(lens, final)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            done = step + 1
    except KeyboardInterrupt:
        print("interrupted: call again with the result to go on")
    finally:
        for p, flag in zip(model.parameters(), flags):
            p.requires_grad_(flag)
    return {"A": list(A.detach()), "b": list(b.detach()), "layers": wanted, "steps_done": done,
            "losses": losses, "optimizer": optimizer.state_dict()}
''',
    ),
    Variant(
        id="collect-one-padded-batch",
        exercise="ex8",
        summary="reads each part's texts in one right-padded batch with an attention mask, and "
                "keeps each text's real positions",
        code='''
def collect(model, tokenizer, texts, held_out=0.25):
    texts = list(texts)
    if len(texts) < 2:
        raise ValueError("collect needs two texts at least")
    if not 0 < held_out < 1:
        raise ValueError("held_out must be strictly between 0 and 1")
    k = min(len(texts) - 1, max(1, math.ceil(held_out * len(texts))))
    result = {}
    for name, part in (("train", texts[:-k]), ("held_out", texts[-k:])):
        rows = [kata.one_sequence(tokenizer(t, return_tensors="pt")["input_ids"], model)[0]
                for t in part]
        if min(len(r) for r in rows) < 2:
            raise ValueError("every text needs two tokens")
        ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
        mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(r) for r in rows], batch_first=True)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        states = torch.stack(out.hidden_states)  # (n + 1, texts, T_max, d)
        result[name] = {
            "hidden": torch.cat([states[:, i, :len(r) - 1] for i, r in enumerate(rows)], dim=1).float(),
            "next_ids": torch.cat([r[1:] for r in rows]),
        }
    return result
''',
    ),
    Variant(
        id="ranks-by-sorting-and-a-pyplot-figure",
        exercise="ex8",
        summary="ranks by where the true token falls in each sorted row, and draws figure 16 "
                "with plt.subplot, semilogy, numpy medians and pcolormesh cells",
        code='''
import numpy as np


def next_token_ranks(model, translators, part):
    n = len(kata.blocks(model)) + 1
    out = torch.zeros(n, len(part["next_ids"]), dtype=torch.long)
    with torch.no_grad():
        for layer in range(n):
            for start in range(0, len(part["next_ids"]), 100):
                states = part["hidden"][layer, start:start + 100]
                rows = lens_log_probs(model, translators, states, layer)
                true = rows.gather(1, part["next_ids"][start:start + 100].unsqueeze(1))
                ordered = rows.sort(dim=1, descending=True).values
                out[layer, start:start + 100] = torch.searchsorted(-ordered, -true, side="left")[:, 0]
    return out


def plot_tuned_lens(logit_ranks, tuned_ranks, logit_row, tuned_row, tokenizer, layers=None,
                    position_label=""):
    n = len(logit_ranks)
    trained = list(range(n - 1)) if layers is None else list(layers)
    for layer in trained:
        if not -n <= layer < n:
            raise IndexError(f"layer {layer} is not a hidden state: the valid range is -{n}..{n - 1}")
    drawn = sorted({l % n for l in trained} | {n - 1})
    fig = plt.figure(figsize=(14, 6))
    plt.subplot(1, 2, 1)
    plt.semilogy(np.arange(n), np.median(np.asarray(logit_ranks), axis=1) + 1, "o-", label="Logit lens")
    plt.semilogy(drawn, np.median(np.asarray(tuned_ranks), axis=1)[drawn] + 1, "s-", label="Tuned lens")
    plt.xticks(range(n), ["Emb"] + [f"L{i}" for i in range(n - 1)], rotation=90)
    plt.xlabel("Layer")
    plt.ylabel("median rank + 1")
    plt.legend()
    ax = plt.subplot(1, 2, 2)
    both = torch.stack([torch.as_tensor(logit_row)[drawn], torch.as_tensor(tuned_row)[drawn]], 1)
    values, ids = both.max(-1)
    mesh = ax.pcolormesh(values.numpy())
    plt.colorbar(mesh)
    for i in range(len(drawn)):
        for j in range(2):
            ax.text(j + 0.5, i + 0.5, tokenizer.decode([int(ids[i, j])])[:6], ha="center", va="center")
    ax.set_xticks([0.5, 1.5], ["logit", "tuned"])
    names = ["Emb"] + [f"L{i}" for i in range(n - 1)]
    ax.set_yticks([i + 0.5 for i in range(len(drawn))], [names[l] for l in drawn])
    ax.set_title(position_label)
    fig.tight_layout()
    return fig
''',
    ),
]
