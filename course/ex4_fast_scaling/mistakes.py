"""Plausible wrong answers to exercise 4, and the diagnosis their first failure must name."""

from course.shared.catalogue import catalogue, template

# The learner's own hook factory, shared by the mistakes below (the solution's is private).
_APPEND = '''
def _append_row(factor):
    def hook(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        grown = torch.cat([hidden, hidden[:1] * factor])
        return (grown, *output[1:]) if isinstance(output, tuple) else grown
    return hook
'''

# The batched experiment, each part in a slot: the extra SETUP, the hooks (HOOK_ALL, of HOOK), the
# forward pass (FORWARD: the BATCH run, the LOGITS read), the removal (REMOVE), and how the run
# holds them together (RUN).
_batched = template('''
def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    {SETUP}
    handles = []
    {RUN}
    return torch.log_softmax(logits.float(), dim=-1)[1:, target_id].cpu()
''', SETUP="", RUN='''
try:
    {HOOK_ALL}
    {FORWARD}
finally:
    {REMOVE}
''', HOOK_ALL='''
for i, block in enumerate(kata.blocks(model)):
    handles.append(block.register_forward_hook({HOOK}, prepend=True))
''', FORWARD='''
with torch.no_grad():
    final = model.base_model(input_ids={BATCH}, use_cache=False).last_hidden_state
    logits = {LOGITS}
''', REMOVE='''
for handle in handles:
    handle.remove()
''', HOOK="_append_row(factor)", BATCH="input_ids",
    LOGITS="model.get_output_embeddings()(final[:, -1])")

_SCALE_ROW = '''
batch = input_ids.repeat(len(kata.blocks(model)) + 1, 1)

def scale_row(row):
    def hook(module, inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        mask = torch.ones(hidden.shape[0], 1, 1, device=hidden.device)
        mask[row] = factor
        hidden = hidden * mask
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
    return hook
'''

MISTAKES = catalogue(
    "ex4",
    ("loop-instead-of-batch", "kept exercise 3's loop, one forward pass per block",
     "loop-instead-of-batch", '''
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
'''),
    ("no-prefix-reuse",
     "batched all n_layers + 1 rows from the embeddings on, recomputing the clean prefix",
     "clean-prefix-recomputed", _batched(SETUP=_SCALE_ROW, HOOK="scale_row(i + 1)", BATCH="batch")),
    ("unembeds-every-position", "computed logits for every position and only then took the last one",
     "unembeds-every-position",
     _APPEND + _batched(LOGITS="model.get_output_embeddings()(final)[:, -1]")),
    ("clean-row-kept", "returned rows 0 .. n-1, the clean run first, instead of rows 1 .. n",
     "clean-row-kept", '''
_right_answer = fast_scaling_experiment

def fast_scaling_experiment(model, input_ids, target_id, factor=0.8):
    input_ids = kata.one_sequence(input_ids, model)
    with torch.no_grad():
        clean = torch.log_softmax(model(input_ids).logits[0, -1].float(), dim=-1)[target_id]
    values = _right_answer(model, input_ids, target_id, factor)
    return torch.cat([clean[None].cpu(), values[:-1]])
'''),
    ("hooks-not-removed-on-error",
     "removed the hooks after the forward pass but not in a finally block",
     "fast-scaling-hooks-not-removed-on-error",
     _APPEND + _batched(RUN="{HOOK_ALL}\n{FORWARD}\n{REMOVE}")),
)
