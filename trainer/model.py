"""The reference run's model: a small GPT-style causal transformer language model, in three sizes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelSize:
    """Shape of the model and of the data it trains on."""

    vocab: int
    seq_len: int
    d_model: int
    layers: int
    heads: int
    batch_size: int
    sequences: int  # size of the generated corpus
    dropout: float = 0.1  # inside the blocks
    embedding_dropout: float = 0.1  # on the embeddings: keeps even `tiny` drawing from torch's RNG


SIZES: dict[str, ModelSize] = {
    # Hundreds of steps per second on one laptop CPU core: the demo and the tests.
    # (Dropout inside the blocks halves its speed on CPU, so it only drops embeddings.)
    "tiny": ModelSize(
        vocab=64, seq_len=32, d_model=32, layers=2, heads=2, batch_size=8, sequences=2048, dropout=0.0
    ),
    # A few steps per second on CPU; ~2M parameters, the size the preemption timing is measured on.
    "small": ModelSize(vocab=128, seq_len=64, d_model=192, layers=4, heads=6, batch_size=16, sequences=8192),
    # ~85M parameters (GPT-2 small's body): sized for one GPU.
    "base": ModelSize(
        vocab=256, seq_len=256, d_model=768, layers=12, heads=12, batch_size=32, sequences=32768
    ),
}


class _Block(nn.Module):
    def __init__(self, size: ModelSize) -> None:
        super().__init__()
        self.heads = size.heads
        self.dropout = size.dropout
        self.norm1 = nn.LayerNorm(size.d_model)
        self.qkv = nn.Linear(size.d_model, 3 * size.d_model)
        self.proj = nn.Linear(size.d_model, size.d_model)
        self.norm2 = nn.LayerNorm(size.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(size.d_model, 4 * size.d_model), nn.GELU(), nn.Linear(4 * size.d_model, size.d_model)
        )
        self.drop = nn.Dropout(size.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        x = x + self.drop(self.proj(attended.transpose(1, 2).reshape(batch, length, width)))
        return x + self.drop(self.mlp(self.norm2(x)))


class TransformerLM(nn.Module):
    """Token + position embeddings, pre-norm transformer blocks, a head tied to the token embedding."""

    def __init__(self, size: ModelSize) -> None:
        super().__init__()
        self.size = size
        self.tokens = nn.Embedding(size.vocab, size.d_model)
        self.positions = nn.Embedding(size.seq_len, size.d_model)
        self.drop = nn.Dropout(size.embedding_dropout)
        self.blocks = nn.ModuleList(_Block(size) for _ in range(size.layers))
        self.norm = nn.LayerNorm(size.d_model)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2's scheme; the default N(0, 1) embedding would make the tied head's logits explode.
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, length, vocab) for token ids of shape (batch, length)."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.drop(self.tokens(tokens) + self.positions(positions))
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tokens.weight.T


def next_token_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting each token of `batch` (sequences of seq_len + 1) from the ones before.

    Takes the model as an argument so a DDP-wrapped model works (its forward does the gradient sync).
    """
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
