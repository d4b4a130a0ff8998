"""The small Llama-family shape the decoder and decode-graph tests build from configs, and the little of a
tokenizer the generation backend reads for such a model (a vocabulary of 72 ids)."""

SHAPE = dict(
    vocab_size=72,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)


class ConfigTokenizer:
    """What the backend reads of a tokenizer, for the config-built models (vocabulary of 72 ids)."""

    pad_token_id, eos_token_id = 0, 1

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))
