"""Plausible wrong answers to exercise 4, and the diagnosis their first failure must name."""

from tests.mistakes import Mistake

# The learner's own hook factory, shared by the mistakes below (the solution's is private).
_APPEND = '''
def _append_row(factor):
    def hook(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        grown = torch.cat([hidden, hidden[:1] * factor])
        return (grown, *output[1:]) if isinstance(output, tuple) else grown
    return hook
'''

MISTAKES = [
    Mistake(
        id="loop-instead-of-batch",
        exercise="ex4",
        summary="kept exercise 3's loop, one forward pass per block",
        diagnosis="loop-instead-of-batch",
        code='''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    values = []
    for block in kata.blocks(model):
        handle = block.register_forward_hook(
            lambda m, i, o: (o[0] * factor, *o[1:]) if isinstance(o, tuple) else o * factor,
            prepend=True,
        )
        try:
            with torch.no_grad():
                logits = model(input_ids).logits[0, -1]
        finally:
            handle.remove()
        values.append(torch.log_softmax(logits.float(), dim=-1)[target_id])
    return torch.stack(values).cpu()
''',
    ),
    Mistake(
        id="no-prefix-reuse",
        exercise="ex4",
        summary="batched all n_layers + 1 rows from the embeddings on, recomputing the clean prefix",
        diagnosis="clean-prefix-recomputed",
        code='''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    blocks = kata.blocks(model)
    batch = input_ids.repeat(len(blocks) + 1, 1)

    def scale_row(row):
        def hook(module, inputs, output):
            hidden = output[0] if isinstance(output, tuple) else output
            mask = torch.ones(hidden.shape[0], 1, 1, device=hidden.device)
            mask[row] = factor
            hidden = hidden * mask
            return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
        return hook

    handles = []
    try:
        for i, block in enumerate(blocks):
            handles.append(block.register_forward_hook(scale_row(i + 1), prepend=True))
        with torch.no_grad():
            final = model.base_model(input_ids=batch, use_cache=False).last_hidden_state
            logits = model.get_output_embeddings()(final[:, -1])
    finally:
        for handle in handles:
            handle.remove()
    return torch.log_softmax(logits.float(), dim=-1)[1:, target_id].cpu()
''',
    ),
    Mistake(
        id="unembeds-every-position",
        exercise="ex4",
        summary="computed logits for every position and only then took the last one",
        diagnosis="unembeds-every-position",
        code=_APPEND + '''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    handles = []
    try:
        for block in kata.blocks(model):
            handles.append(block.register_forward_hook(_append_row(factor), prepend=True))
        with torch.no_grad():
            final = model.base_model(input_ids=input_ids, use_cache=False).last_hidden_state
            logits = model.get_output_embeddings()(final)[:, -1]
    finally:
        for handle in handles:
            handle.remove()
    return torch.log_softmax(logits.float(), dim=-1)[1:, target_id].cpu()
''',
    ),
    Mistake(
        id="clean-row-kept",
        exercise="ex4",
        summary="returned rows 0 .. n-1, the clean run first, instead of rows 1 .. n",
        diagnosis="clean-row-kept",
        code='''
_right_answer = fast_scaling_experiment

def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        clean = torch.log_softmax(model(input_ids).logits[0, -1].float(), dim=-1)[target_id]
    values = _right_answer(model, input_ids, target_id, factor)
    return torch.cat([clean[None].cpu(), values[:-1]])
''',
    ),
    Mistake(
        id="hooks-not-removed-on-error",
        exercise="ex4",
        summary="removed the hooks after the forward pass but not in a finally block",
        diagnosis="fast-scaling-hooks-not-removed-on-error",
        code=_APPEND + '''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    handles = [
        block.register_forward_hook(_append_row(factor), prepend=True)
        for block in kata.blocks(model)
    ]
    with torch.no_grad():
        final = model.base_model(input_ids=input_ids, use_cache=False).last_hidden_state
        logits = model.get_output_embeddings()(final[:, -1])
    for handle in handles:
        handle.remove()
    return torch.log_softmax(logits.float(), dim=-1)[1:, target_id].cpu()
''',
    ),
]
