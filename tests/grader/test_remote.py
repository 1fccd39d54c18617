"""The grader's trust boundary, piece by piece (issue 22): what crosses, within which limits.

The exercises' own tests run across the boundary in ``test_mistakes.py`` and ``test_variants.py``
(``--kata-remote fork``) and against hostile submissions in ``test_sandbox.py``; here the codec,
the channel and the rebuilt exceptions are held to their contract directly.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
import torch
from matplotlib.colors import CenteredNorm, TwoSlopeNorm

from kata.hooks import missing_hook_tables
from kata.serve.codec import Codec, FrameError, Limits, read_frame, write_frame



def roundtrip(value, limits: Limits | None = None):
    encoder = Codec(limits or Limits())
    node = encoder.encode(value)
    return Codec(limits or Limits()).decode(node, encoder.blobs)


def test_plain_values_keep_their_types():
    value = {"i": 3, "b": True, "f": 0.5, "nan": math.nan, "inf": -math.inf, "s": "é",
             "n": None, "t": (1, [2, (3,)]), "set": {1, 2}, 4: "int key",
             "np": np.float32(1.5), "np_int": np.int64(7), "size": torch.Size([2, 3]),
             "dtype": torch.bfloat16}
    back = roundtrip(value)
    assert back["i"] == 3 and type(back["i"]) is int and back["b"] is True
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf
    assert back["t"] == (1, [2, (3,)]) and isinstance(back["t"], tuple)
    assert back["set"] == {1, 2} and back[4] == "int key"
    assert type(back["np"]) is np.float32 and type(back["np_int"]) is np.int64
    assert back["size"] == torch.Size([2, 3]) and back["dtype"] is torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64,
                                   torch.bool, torch.uint8])
def test_tensors_keep_dtype_shape_values_and_grad(dtype):
    tensor = (torch.arange(24) % 3).to(dtype).reshape(2, 3, 4).transpose(0, 2)  # not contiguous
    back = roundtrip(tensor)
    assert back.dtype == dtype and back.shape == tensor.shape and torch.equal(back, tensor)
    leaf = torch.ones(3, requires_grad=True)
    assert roundtrip(leaf).requires_grad and roundtrip(leaf).grad_fn is None
    assert roundtrip(leaf * 2).grad_fn is not None  # not detached: it says so
    assert roundtrip(torch.empty(0, 5)).shape == (0, 5)


def test_views_that_count_as_contiguous_but_keep_odd_strides_cross():
    # log_probs[1:, t] of a (2, vocab) tensor: one element, stride vocab; and a zero-stride
    # broadcast. Both "are contiguous" to torch and still refuse a dtype view.
    table = torch.arange(12.0).reshape(2, 6)
    for view in (table[1:, 3], table[:1, 2:3], torch.tensor(2.0).expand(1, 1)):
        back = roundtrip(view)
        assert back.shape == view.shape and torch.equal(back, view)


def test_a_returned_argument_comes_back_as_the_very_object():
    extra = torch.arange(3.0)
    request = Codec()
    node = request.encode([torch.ones(2), extra])
    received = Codec()
    args = received.decode(node, request.blobs)
    reply = Codec(known={id(o): i for i, o in enumerate(received.table)})
    answer = reply.encode((args[0] * 2, args[1]))
    back = Codec(table=request.table).decode(answer, reply.blobs)
    assert back[1] is extra and back[0] is not extra


def test_a_tensor_changed_in_place_is_changed_on_the_other_side():
    original = torch.zeros(3)
    request = Codec()
    node = request.encode([original])
    received = Codec()
    [copy] = received.decode(node, request.blobs)
    versions = [t._version for t in received.table]
    copy.add_(5)
    reply = Codec()
    changed = reply.mutations(received.table, versions)
    Codec(table=request.table).apply_mutations(changed, reply.blobs)
    assert torch.equal(original, torch.full((3,), 5.0))


@pytest.mark.parametrize("node, why", [
    ({"$tensor": 0, "dtype": "float32", "shape": [3]}, "does not match"),  # 4 bytes for 3
    ({"$tensor": 0, "dtype": "object", "shape": [1]}, "unknown dtype"),
    ({"$nd": 0, "dtype": "O", "shape": [1]}, "unknown dtype"),
    ({"$f": "1e999"}, "no known form"),
    ({"$obj": "pickle", "data": "..."}, "unknown kind"),
    ({"$obj": "ref", "i": 5}, "no object"),
    ({"$tensor": 7, "dtype": "float32", "shape": [1]}, "no blob"),
    ({"$d": [[[1, 2], 3]]}, "cannot be a key"),
    ({"x": 1}, "no known form"),
])
def test_malformed_values_are_refused_by_name(node, why):
    with pytest.raises(FrameError, match=why):
        Codec().decode(node, [b"\0" * 4])


def test_limits_hold_for_size_count_depth_and_strings():
    small = Limits(frame_bytes=1000, items=50, depth=5, string_chars=20)
    with pytest.raises(FrameError, match="MiB of tensors"):
        Codec(small).encode(torch.zeros(1000))
    # refused before any copy: copied, each would be terabytes
    with pytest.raises(FrameError, match="MiB of tensors"):
        Codec().encode(torch.zeros(1).expand(2**40))
    with pytest.raises(FrameError, match="MiB of tensors"):
        Codec().encode(np.broadcast_to(np.zeros(1), (2**40,)))
    with pytest.raises(FrameError, match="more than 50 values"):
        Codec(small).encode(list(range(100)))
    nested: list = []
    for _ in range(10):
        nested = [nested]
    with pytest.raises(FrameError, match="nested deeper"):
        Codec(small).encode(nested)
    with pytest.raises(FrameError, match="characters"):
        Codec(small).encode("x" * 21)
    with pytest.raises(FrameError, match="nested deeper"):
        Codec(small).decode(nested, [])


def _across_a_pipe(value):
    encoder = Codec()
    node = encoder.encode(value)
    read_fd, write_fd = os.pipe()
    try:
        write_frame(write_fd, {"value": node}, encoder.blobs)
        header, blobs = read_frame(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    return Codec().decode(header["value"], blobs)


def test_tensors_of_one_frame_are_exact_aligned_and_each_its_own():
    """Each tensor read holds exactly the values sent, whatever came before it (a blob of an odd
    size leaves the next misaligned: it is copied), and changing one in place changes no
    other."""
    sent = [torch.ones(3, dtype=torch.uint8), torch.randn(5, dtype=torch.float64),
            torch.randn(2, 3).t(), torch.randn(4, dtype=torch.complex128), torch.zeros(0, 2)]
    got = _across_a_pipe(sent)
    for before, after in zip(sent, got):
        assert after.dtype == before.dtype and torch.equal(after, before)
        assert after.data_ptr() % after.element_size() == 0
    got[1].fill_(7.0)
    assert all(torch.equal(after, before) for k, (before, after) in enumerate(zip(sent, got))
               if k != 1)


def test_a_large_tensor_is_read_in_place_and_a_small_one_keeps_no_large_body():
    """A tensor that is most of its frame is a view of the frame's body (not copied); a small
    one sent with a large blob is copied out, so it does not keep the large blob in memory."""
    small, large = torch.arange(4.0), torch.randn(1000)
    got_small, got_large = _across_a_pipe([small, large])
    assert torch.equal(got_small, small) and torch.equal(got_large, large)
    body_start = got_large.data_ptr() - small.numel() * small.element_size()
    assert got_small.data_ptr() != body_start, "the small tensor keeps the frame's body alive"
    again = _across_a_pipe([large])[0]
    assert torch.equal(again, large)


def test_frames_are_read_within_their_limits():
    read_fd, write_fd = os.pipe()
    try:
        write_frame(write_fd, {"op": "hello", "id": 1}, [b"abc"])
        header, blobs = read_frame(read_fd)
        assert header["op"] == "hello" and blobs == [b"abc"]
        os.write(write_fd, (2**31).to_bytes(4, "big") + (0).to_bytes(8, "big"))
        with pytest.raises(FrameError, match="larger than the channel's limit"):
            read_frame(read_fd)
        text = b'{"x": NaN, "blobs": []}'
        os.write(write_fd, len(text).to_bytes(4, "big") + (0).to_bytes(8, "big") + text)
        with pytest.raises(FrameError, match="not valid JSON"):
            read_frame(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_learners_exception_is_rebuilt_as_a_builtin_never_as_a_diagnosis():
    from course.shared.diagnosis import diagnosis_of
    from grading.box.remote import rebuild_exception

    info = {"chain": [{"types": ["Diagnosis", "AssertionError", "Exception"],
                       "module": "exercises.ex1", "args": ["<!--<script>"], "text": "x"}],
            "stub": None, "where": "exercises/ex1.py, line 3, in f"}
    error = rebuild_exception(info, {})
    assert isinstance(error, AssertionError) and diagnosis_of(error) is None
    assert type(error).__name__ == "Diagnosis" and error.kata_where.endswith("in f")
    index = rebuild_exception({"chain": [{"types": ["MyError", "IndexError", "LookupError"],
                                          "module": "exercises.ex1", "args": ["out of range"]}]},
                              {})
    assert isinstance(index, IndexError) and str(index) == "out of range"
    key = rebuild_exception({"chain": [{"types": ["KeyError"], "module": "builtins",
                                        "args": ["k"]}]}, {})
    assert str(key) == "'k'"  # as the learner's own KeyError('k') reads
    stub = rebuild_exception({"chain": [{"types": ["NotImplementedError"],
                                         "module": "builtins", "args": []}],
                              "stub": "tokenize"}, {})
    from kata.errors import stub_reached

    assert stub_reached(stub, "/nowhere") == "tokenize"
    original = RuntimeError("the test's own hook failed")
    assert rebuild_exception({"chain": [{"types": ["CallbackError"], "token": 1}]},
                             {1: original}) is original


def test_torchs_hook_tables_are_where_the_kata_looks():
    """A rename in torch would switch the hook hygiene off silently: it fails here instead."""
    assert missing_hook_tables() == []


def test_a_model_sent_by_value_records_hidden_states_in_a_fresh_process(tmp_path):
    """A model the test builds (not a session model) crosses pickled; in the learner's process,
    where no model of its class was ever built, it must still give output_hidden_states."""
    import subprocess

    from transformers import GPT2Config, GPT2LMHeadModel

    from grading.box.remote import _pickled_without_hooks

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=8, vocab_size=50,
                                       n_positions=16)).eval()
    (tmp_path / "model.pkl").write_bytes(_pickled_without_hooks(model))
    load = ("import pickle, sys, torch\n"
            "from kata.compat import after_unpickling\n"
            "model = after_unpickling(pickle.loads(open(sys.argv[1], 'rb').read()))\n"
            "out = model(torch.tensor([[1, 2, 3]]), output_hidden_states=True)\n"
            "print(len(out.hidden_states))\n")
    done = subprocess.run([sys.executable, "-c", load, str(tmp_path / "model.pkl")],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "3", done.stderr[-2000:]


def test_a_sandbox_that_never_starts_is_the_machines_fault(monkeypatch, tmp_path):
    """The learner's server dies before any learner file ran (here: it exits at once, as a
    broken interpreter or sandbox would): the exercise is an environment error, never the
    learner's crash."""
    from pathlib import Path

    from grading.box import learner_box
    from grading.core.records import Status
    from grading.box.submissions import GradingOptions, grade_submission
    from grading.core.declarations import load_exercises

    root = Path(__file__).resolve().parents[2]
    exercise = next(e for e in load_exercises() if e.id == "ex2")
    submission = tmp_path / "learner" / "exercises"
    submission.mkdir(parents=True)
    (submission / f"{exercise.module}.py").write_text((root / exercise.source("solutions"))
                                                      .read_text())
    monkeypatch.setattr(learner_box.LearnerBox, "_command", staticmethod(
        lambda root, specs, cpu: [sys.executable, "-c", "import sys; sys.exit('no python here')"]))
    result = grade_submission(submission.parent, "learner", root, [exercise],
                              GradingOptions(timeout=60), tmp_path)
    row = result.exercises[0]
    assert row.status is Status.ENVIRONMENT_ERROR, (row.status, row.message)
    assert "not yours" in row.message


# --------------------------------------------------------------------------- figures as descriptions


def figure_roundtrip(fig):
    """``fig`` described on the learner's side, through the codec, drawn again on the trusted one."""
    from kata.serve.figures import describe, rebuild

    return rebuild(roundtrip(describe(fig)))


def heatmap_reading(fig) -> list:
    """What the tests read of every heatmap of ``fig`` (``course.shared.support.drawn_heatmaps``)."""
    from course.shared.support import drawn_heatmaps

    return [(np.where(np.isnan(h.values), None, h.values).tolist(),  # NaN: a masked cell
             h.corners.tolist(), h.cmap, h.clim, float(h.norm(0.0)), h.colorbar, h.rows_up)
            for ax in fig.axes for h in drawn_heatmaps(ax)]


MESHES = {
    "pcolormesh": lambda ax, a: ax.pcolormesh(a, cmap="RdBu_r", vmin=-6, vmax=6),
    "coordinates": lambda ax, a: ax.pcolormesh(np.arange(5) * 2.0, [0, 1, 3, 4], a,
                                               cmap="coolwarm", norm=CenteredNorm()),
    "gouraud": lambda ax, a: ax.pcolormesh(np.arange(4), np.arange(3), a, shading="gouraud",
                                           norm=TwoSlopeNorm(0.0)),
    "pcolor": lambda ax, a: ax.pcolor(np.ma.masked_greater(a, 5), cmap="PiYG", vmin=-6, vmax=6),
    "imshow": lambda ax, a: ax.imshow(a, cmap="RdBu_r", origin="lower"),
}


@pytest.mark.parametrize("kind", MESHES)
def test_a_heatmap_crosses_as_it_is_drawn_whatever_the_call(kind):
    """Values, cell positions, colours, norm and colour bar read the same on both sides; the
    colour bar's own mesh is no heatmap on either."""
    import matplotlib.pyplot as plt

    from course.shared.support import drawn_heatmaps

    fig, (ax, other) = plt.subplots(1, 2)
    drawn = MESHES[kind](ax, np.arange(12.0).reshape(3, 4) - 5)
    fig.colorbar(drawn, ax=ax)
    other.invert_yaxis()
    other.pcolormesh(np.ones((2, 2)))
    try:
        back = figure_roundtrip(fig)
        assert heatmap_reading(back) == heatmap_reading(fig)
        assert len(heatmap_reading(fig)) == 2 and not heatmap_reading(fig)[1][-1]  # turned over
        [bar] = [a for a in back.axes if getattr(a, "_colorbar", None) is not None]
        assert drawn_heatmaps(bar) == [] and len(back.axes) == len(fig.axes)
    finally:
        plt.close(fig)


def test_a_colour_bars_own_mesh_is_not_described_as_a_heatmap():
    import matplotlib.pyplot as plt

    from kata.serve.figures import describe

    fig, ax = plt.subplots()
    fig.colorbar(ax.pcolormesh(np.eye(3)), ax=ax, label="bar")
    try:
        assert [len(axes["meshes"]) for axes in describe(fig)["axes"]] == [1, 0]
    finally:
        plt.close(fig)


def described_mesh(**changes) -> dict:
    """A one-axes figure description holding one mesh, with ``changes`` made to the mesh."""
    mesh = {"array": np.zeros((2, 3)), "coordinates": np.zeros((3, 4, 2)), "shading": "flat",
            "cmap": "viridis", "clim": [0.0, 1.0], "norm": "Normalize", "vcenter": None,
            "colorbar": None}
    mesh["coordinates"][..., 0], mesh["coordinates"][..., 1] = np.meshgrid(np.arange(4.0),
                                                                           np.arange(3.0))
    return {"axes": [{"meshes": [{**mesh, **changes}]}]}


@pytest.mark.parametrize("changes, why", [
    ({"coordinates": [[[0.0, 0.0]]]}, "no known form"),  # a list, not an array
    ({"array": np.zeros((2, 3), dtype=np.int64)}, "no known form"),
    ({"shading": "nearest"}, "no known form"),  # the learner's side sends flat or gouraud
    ({"coordinates": np.zeros((3, 4))}, "shape"),
    ({"coordinates": np.zeros((1, 4, 2))}, "shape"),  # flat: one more corner than cells
    ({"coordinates": np.full((3, 4, 2), np.inf)}, "not finite"),
    ({"coordinates": np.zeros((1100, 1000, 2)), "array": np.zeros(1)}, "cells"),
])
def test_a_mesh_description_is_checked_before_it_is_drawn(changes, why):
    from kata.serve.figures import rebuild

    with pytest.raises(ValueError, match=why):
        rebuild(described_mesh(**changes))


def test_a_mesh_description_draws_nothing_it_does_not_hold():
    """Values that do not fill the cells (an RGB mesh) draw no heatmap; a colour bar link to
    the mesh's own axes or to no axes draws no colour bar; an unknown colormap keeps its name."""
    from kata.serve.figures import rebuild
    from course.shared.support import drawn_heatmaps

    assert len(rebuild(described_mesh(array=np.zeros((2, 3, 3)))).axes[0].collections) == 0
    for index in (0, 1, -1, True):
        fig = rebuild(described_mesh(colorbar=index))
        assert len(fig.axes) == 1 and not drawn_heatmaps(fig.axes[0])[0].colorbar
    [heatmap] = drawn_heatmaps(rebuild(described_mesh(cmap="learners_own")).axes[0])
    assert heatmap.cmap == "learners_own" and heatmap.values.shape == (2, 3)


@pytest.mark.parametrize("size, dpi", [((150.0, 150.0), 100.0), ((6.4, 4.8), 1e6), ((1600.0, 1.0), 72.0)])
def test_a_figure_too_large_to_draw_is_drawn_smaller_at_the_same_size_in_inches(size, dpi):
    """A learner's figure of 150 x 150 inches would make the trusted side draw 2.25e8 pixels
    (900 MB): it is rebuilt at a lower dpi, every size in inches and points kept."""
    from kata.serve.figures import MAX_PIXELS, MAX_SIDE, rebuild

    fig = rebuild({"size": list(size), "dpi": dpi, "axes": [{"title": "big"}]})
    width, height = fig.get_size_inches()
    assert (width, height) == pytest.approx(size)
    assert width * height * fig.dpi ** 2 <= MAX_PIXELS * 1.0001
    assert max(width, height) * fig.dpi <= MAX_SIDE * 1.0001
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    assert renderer.width * renderer.height <= MAX_PIXELS * 1.01


def test_a_figure_too_large_for_any_readable_dpi_is_refused():
    from kata.serve.figures import rebuild

    for size in ([1e4, 1.0], [600.0, 600.0]):  # 600 x 600 inches at 100 dpi: 14 GB of pixels
        with pytest.raises(ValueError, match="too large to draw"):
            rebuild({"size": size, "dpi": 100.0, "axes": [{"title": "wide"}]})
