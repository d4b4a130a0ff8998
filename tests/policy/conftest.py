import pytest


def _byte_level_alphabet() -> list[str]:
    """GPT-2's 256 byte-level BPE symbols (printable bytes as themselves, the rest shifted above 255)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    codes, shifted = printable[:], 0
    for byte in range(256):
        if byte not in printable:
            codes.append(256 + shifted)
            shifted += 1
    return [chr(c) for c in codes]


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_gguf(path, layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2, seed: int = 0):
    """A GGUF file of a 2-layer Llama with a byte-level BPE tokenizer and a ChatML template (≈0.2 MB, F32)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *_byte_level_alphabet(), "Ġt", "he"]
    ff, head_dim = 2 * hidden, hidden // heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(512)  # room for a byte-level prompt of the test mix and its completion
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    w.add_token_merges(["Ġ t", "h e"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    w.add_tensor("token_embd.weight", weight(len(tokens), hidden))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(hidden, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh polyrl cache (POLYRL_CACHE) for one test; returns its models folder."""
    monkeypatch.setenv("POLYRL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


@pytest.fixture
def gguf_writer():
    """``write_tiny_gguf(path, seed=…)``; skips without the gguf package."""
    pytest.importorskip("gguf", reason="writing a .gguf file needs the gguf package: pip install gguf")
    return write_tiny_gguf


@pytest.fixture
def tiny_gguf(tmp_path, gguf_writer):
    (tmp_path / "files").mkdir()
    return gguf_writer(tmp_path / "files" / "tiny.gguf")
