"""Model shapes published in 2024 (Llama 3 405B, Nemotron-4 15B and 340B), added to :data:`~.config.PRESETS`.

Each entry is ``name: (ModelSpec keyword arguments, default global batch in sequences)``; :mod:`.config`
builds the :class:`~.config.ModelSpec` (this module imports nothing from it, so either may be imported
first).  Nemotron-4's squared-ReLU FFN has two GEMMs and an elementwise activation, priced as the
generator's ``gelu`` FFN.
"""

from __future__ import annotations

from typing import Any

_ROPE_NO_BIAS: dict[str, Any] = {
    "tied_embeddings": False,
    "learned_position_embeddings": False,
    "bias": False,
}

PRESETS_2024: dict[str, tuple[dict[str, Any], int]] = {
    "llama3-405b": (
        {
            "num_layers": 126,
            "hidden_size": 16384,
            "num_heads": 128,
            "num_kv_heads": 8,
            "seq_length": 8192,
            "vocab_size": 128256,
            "ffn_hidden_size": 53248,
            "activation": "swiglu",
            "norm": "rmsnorm",
            **_ROPE_NO_BIAS,
            "source": "Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 3 (126 layers, model dim 16384, "
            "FFN 53248, 128 heads, 8 KV heads) and section 3.4 (sequence 8192, batch 16M tokens = 2048 x "
            "8192); vocabulary 128256 from the released config",
        },
        2048,
    ),
    "nemotron4-15b": (
        {
            "num_layers": 32,
            "hidden_size": 6144,
            "num_heads": 48,
            "num_kv_heads": 8,
            "seq_length": 4096,
            "vocab_size": 256000,
            **_ROPE_NO_BIAS,
            "source": "Parmar et al. 2024, 'Nemotron-4 15B Technical Report', Table 1 (32 layers, hidden 6144, "
            "48 heads, 8 KV heads, sequence 4096, vocabulary 256,000; FFN 4h with squared ReLU, RoPE, no "
            "biases, untied embeddings); global batch 2304 is our default (the 340B's)",
        },
        2304,
    ),
    "nemotron4-340b": (
        {
            "num_layers": 96,
            "hidden_size": 18432,
            "num_heads": 96,
            "num_kv_heads": 8,
            "seq_length": 4096,
            "vocab_size": 256000,
            **_ROPE_NO_BIAS,
            "source": "NVIDIA 2024, 'Nemotron-4 340B Technical Report', Table 1 (96 layers, hidden 18432, 96 "
            "heads, 8 KV heads, sequence 4096, vocabulary 256,000; FFN 4h = 73728 with squared ReLU, RoPE, "
            "no biases, untied embeddings), global batch 2304 (model card)",
        },
        2304,
    ),
}

__all__ = ["PRESETS_2024"]
