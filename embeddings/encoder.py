"""all-MiniLM-L6-v2 as a pure-numpy BERT forward pass (no torch).

It reproduces sentence-transformers exactly (Transformer -> mean Pooling -> Normalize,
256-token truncation); ``tests/unit/test_embeddings_match_reference.py`` checks it against
vectors produced by the real library.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from embeddings.batching import LanedEncoder
from embeddings.weights import _FIX_HINT, MINILM_REPO_ID, EmbeddingModelUnavailable, resolve_minilm_dir

# Eigen's (and XLA's) float32 rational approximation of erf, x * P(x^2) / Q(x^2) on
# [-4, 4]; beyond that erf is +-1 in float32. Measured max abs error vs math.erf: ~5e-7.
# numpy has no erf, and np.vectorize(math.erf) is ~30x slower -- it would dominate runtime.
_ERF_ALPHA = np.array(
    [
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    ],
    dtype=np.float32,
)
_ERF_BETA = np.array(
    [
        -1.45660718464996e-05,
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    ],
    dtype=np.float32,
)
_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))

# Vectors kept by the word pieces they were computed from (after truncation), the newest this many.
# Texts whose first 256 pieces agree have one vector: a chat's searchable text (record_chat) grows
# past the pieces read, so from its ~13th turn 5 turns in 6 re-embedded the same 256 pieces (~100
# ms each on 2 cores). embeddings.cache keys on the whole text and cannot see the truncation.
PIECES_MEMO_SIZE = 512


# Elements per GELU block: ~4 float32 temporaries of this size stay cache-resident.
# Blocking plus in-place updates makes GELU ~6x faster than whole-array numpy
# expressions, which otherwise cost about as much as the FFN matrix multiplies.
_GELU_BLOCK_ELEMENTS = 1 << 17


def _gelu_block_(h: np.ndarray) -> None:
    """In place: h <- 0.5 * h * (1 + erf(h / sqrt(2)))."""
    u = h * _INV_SQRT2
    np.clip(u, np.float32(-4.0), np.float32(4.0), out=u)
    u2 = u * u
    p = u2 * _ERF_ALPHA[0]
    p += _ERF_ALPHA[1]
    for a in _ERF_ALPHA[2:]:
        p *= u2
        p += a
    q = u2 * _ERF_BETA[0]
    q += _ERF_BETA[1]
    for b in _ERF_BETA[2:]:
        q *= u2
        q += b
    p *= u
    p /= q  # p = erf(h / sqrt(2))
    p += np.float32(1.0)
    p *= np.float32(0.5)
    h *= p


def _gelu_(h: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU of a 2-D float32 array, in place; BERT's "gelu" is not the tanh form."""
    rows = max(1, _GELU_BLOCK_ELEMENTS // h.shape[1])
    for start in range(0, h.shape[0], rows):
        _gelu_block_(h[start : start + rows])
    return h


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(var + np.float32(eps)) * gamma + beta


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3*hidden): Q, K, V fused into one GEMM
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ff1_w: np.ndarray
    ff1_b: np.ndarray
    ff2_w: np.ndarray
    ff2_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


class _MiniLMModel:
    """Immutable weights + tokenizer; ``encode`` is pure, hence safe to share across threads."""

    def __init__(self, model_dir: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = _read_json(model_dir / "config.json")
        st_config = _read_json(model_dir / "sentence_bert_config.json")
        self.num_heads = int(config.get("num_attention_heads", 12))
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        if config.get("hidden_act", "gelu") != "gelu":
            raise EmbeddingModelUnavailable(
                f"{model_dir}: unsupported hidden_act {config['hidden_act']!r}"
            )

        raw = load_file(str(model_dir / "model.safetensors"))
        # removeprefix: tolerate BertFor*-style dumps whose keys start with "bert.".
        w = {k.removeprefix("bert."): v.astype(np.float32, copy=False) for k, v in raw.items()}

        def t(name: str) -> np.ndarray:
            # torch Linear stores (out, in); pre-transpose once so forward is x @ W.
            return np.ascontiguousarray(w[name].T)

        self.word_emb = w["embeddings.word_embeddings.weight"]
        self.pos_emb = w["embeddings.position_embeddings.weight"]
        self.type0_emb = w["embeddings.token_type_embeddings.weight"][0]
        self.emb_ln_g = w["embeddings.LayerNorm.weight"]
        self.emb_ln_b = w["embeddings.LayerNorm.bias"]
        self.hidden = self.word_emb.shape[1]
        self.layers: list[_Layer] = []
        n_layers = int(config.get("num_hidden_layers", 6))
        for i in range(n_layers):
            p = f"encoder.layer.{i}."
            a = p + "attention."
            self.layers.append(
                _Layer(
                    qkv_w=np.concatenate(
                        [t(a + f"self.{n}.weight") for n in ("query", "key", "value")], axis=1
                    ),
                    qkv_b=np.concatenate(
                        [w[a + f"self.{n}.bias"] for n in ("query", "key", "value")]
                    ),
                    out_w=t(a + "output.dense.weight"),
                    out_b=w[a + "output.dense.bias"],
                    ln1_g=w[a + "output.LayerNorm.weight"],
                    ln1_b=w[a + "output.LayerNorm.bias"],
                    ff1_w=t(p + "intermediate.dense.weight"),
                    ff1_b=w[p + "intermediate.dense.bias"],
                    ff2_w=t(p + "output.dense.weight"),
                    ff2_b=w[p + "output.dense.bias"],
                    ln2_g=w[p + "output.LayerNorm.weight"],
                    ln2_b=w[p + "output.LayerNorm.bias"],
                )
            )

        # sentence-transformers truncates to max_seq_length (256 here), not the
        # tokenizer.json default (128), and pads per batch, not to a fixed length.
        self.max_seq_length = min(int(st_config.get("max_seq_length", 256)), self.pos_emb.shape[0])
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.no_padding()  # we pad ourselves, per length-sorted batch
        tokenizer.enable_truncation(max_length=self.max_seq_length)
        # Configured once here and never mutated after: concurrent encode calls only take
        # shared borrows of the Rust tokenizer, so no lock is needed.
        self.tokenizer = tokenizer
        self._memo: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._memo_lock = threading.Lock()

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.hidden), dtype=np.float32)
        # sentence-transformers strips inputs (a no-op for BERT's whitespace split; cheap parity).
        all_ids = [e.ids for e in self.tokenizer.encode_batch([str(s).strip() for s in texts])]
        keys = [np.asarray(x, dtype=np.int32).tobytes() for x in all_ids]
        out = np.empty((len(all_ids), self.hidden), dtype=np.float32)
        with self._memo_lock:
            kept = [self._memo.get(key) for key in keys]
        todo = [i for i, v in enumerate(kept) if v is None]
        for i, v in enumerate(kept):
            if v is not None:
                out[i] = v
        ids = [all_ids[i] for i in todo]
        for chunk in _length_batches([len(x) for x in ids], batch_size):
            width = len(ids[chunk[-1]])  # chunks are sorted by length
            batch = np.zeros((len(chunk), width), dtype=np.int64)  # 0 == [PAD]
            mask = np.zeros((len(chunk), width), dtype=np.float32)
            for row, i in enumerate(chunk):
                batch[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1.0
            out[[todo[i] for i in chunk]] = self._forward(batch, mask)
        with self._memo_lock:
            for i, key in enumerate(keys):
                if key in self._memo:  # (another thread may have dropped or added it meanwhile)
                    self._memo.move_to_end(key)
                else:
                    self._memo[key] = out[i].copy()
            while len(self._memo) > PIECES_MEMO_SIZE:
                self._memo.popitem(last=False)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        bsz, seq = ids.shape
        heads, hid = self.num_heads, self.hidden
        hd = hid // heads
        x = self.word_emb[ids] + self.pos_emb[:seq] + self.type0_emb  # token_type_ids are all 0
        # Keep activations 2-D (tokens x hidden) so every projection is a single GEMM.
        x = _layer_norm(x.reshape(bsz * seq, hid), self.emb_ln_g, self.emb_ln_b, self.eps)
        # Additive key mask: padded keys get ~zero attention weight.
        key_bias = ((mask - np.float32(1.0)) * np.float32(1e9))[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(hd))
        for layer in self.layers:
            qkv = x @ layer.qkv_w + layer.qkv_b
            qkv = qkv.reshape(bsz, seq, 3, heads, hd).transpose(2, 0, 3, 1, 4)  # 3,B,H,T,d
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + key_bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(bsz * seq, hid)
            attn = ctx @ layer.out_w + layer.out_b
            x = _layer_norm(attn + x, layer.ln1_g, layer.ln1_b, self.eps)
            ff = x @ layer.ff1_w
            ff += layer.ff1_b
            ff = _gelu_(ff) @ layer.ff2_w + layer.ff2_b
            x = _layer_norm(ff + x, layer.ln2_g, layer.ln2_b, self.eps)
        # Pooling(mean over real tokens, [CLS]/[SEP] included) then Normalize, as in
        # sentence-transformers (clamps: 1e-9 on the token count, 1e-12 on the norm).
        x = x.reshape(bsz, seq, hid)
        summed = np.einsum("bth,bt->bh", x, mask)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)


def _length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Group indices into length-sorted batches (padding is per batch).

    Besides capping a batch at ``batch_size``, a new batch starts when padding would
    exceed half the batch: otherwise one 256-piece text pads 31 short ones to 256
    (sentence-transformers' plain 32-chunks do exactly that). Results do not depend on
    batching beyond float rounding.
    """
    batches: list[list[int]] = []
    current: list[int] = []
    real_tokens = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        n = lengths[i]
        too_much_padding = n * (len(current) + 1) > 2 * (real_tokens + n)
        if current and (len(current) >= batch_size or too_much_padding):
            batches.append(current)
            current, real_tokens = [], 0
        current.append(i)
        real_tokens += n
    if current:
        batches.append(current)
    return batches


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


# The variables by which a user sets BLAS's thread count themselves (then we leave it alone).
_BLAS_THREAD_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _one_blas_thread() -> None:
    """One BLAS thread for the process, unless the user chose a count. A query's embedding is a
    few dozen small GEMMs; OpenBLAS's extra workers spin between them and take the cores Postgres
    and the event loop need: on 2 cores load_context burnt 84-88 ms of CPU with them and 40-42
    without, and its p95 fell by ~15 ms. A batch of 64 texts takes ~13 % longer on one thread;
    concurrent batches still use every core (each runs in its own thread)."""
    if any(name in os.environ for name in _BLAS_THREAD_SETTINGS):
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


# Weights are ~90 MB: load each model directory once per process, whichever thread asks first.
_MODEL_CACHE: dict[Path, _MiniLMModel] = {}
_MODEL_CACHE_LOCK = threading.Lock()


def _load_model(model_dir: Path) -> _MiniLMModel:
    key = model_dir.resolve()
    model = _MODEL_CACHE.get(key)
    if model is not None:
        return model
    with _MODEL_CACHE_LOCK:
        model = _MODEL_CACHE.get(key)
        if model is None:
            _one_blas_thread()
            try:
                model = _MiniLMModel(key)
            except EmbeddingModelUnavailable:
                raise
            except Exception as exc:
                raise EmbeddingModelUnavailable(
                    f"could not load all-MiniLM-L6-v2 from {key}: {type(exc).__name__}: {exc}. "
                    + _FIX_HINT
                ) from exc
            _MODEL_CACHE[key] = model
    return model


# One batching encoder per model and batch size in the process: every caller shares its threads.
_BATCHERS: dict[tuple[Path, int], LanedEncoder] = {}


def _batcher(model_dir: Path, batch_size: int) -> LanedEncoder:
    key = (model_dir.resolve(), batch_size)
    batcher = _BATCHERS.get(key)
    if batcher is None:
        model = _load_model(model_dir)
        with _MODEL_CACHE_LOCK:
            batcher = _BATCHERS.setdefault(key, LanedEncoder(lambda texts: model.encode(list(texts), batch_size)))
    return batcher


class MiniLMEmbeddings(Embeddings):
    """sentence-transformers/all-MiniLM-L6-v2 (384-d, unit-norm) in pure numpy.

    ``model_dir`` defaults to ``resolve_minilm_dir()``, evaluated on first use. Weights
    are loaded lazily, once per process and directory, and instances are thread-safe.
    Inputs longer than 256 word pieces are truncated, as sentence-transformers does.
    """

    model_name: str = MINILM_REPO_ID
    dims: int = 384

    def __init__(
        self, model_dir: str | os.PathLike[str] | None = None, *, batch_size: int = 32
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._dir_lock = threading.Lock()
        self.batch_size = batch_size
        self._batching: LanedEncoder | None = None

    @property
    def model_dir(self) -> Path:
        if self._model_dir is None:
            with self._dir_lock:
                if self._model_dir is None:
                    self._model_dir = resolve_minilm_dir()
        return self._model_dir

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array of shape (len(texts), 384)."""
        return _load_model(self.model_dir).encode(list(texts), self.batch_size)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encode([text])[0].tolist()

    # CPU-bound numpy work (BLAS releases the GIL): off the event loop, on the process' few
    # embedding threads, batched with what other callers ask meanwhile (embeddings.batching).
    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._batching is None:  # the first call loads the weights: not on the event loop
            self._batching = await asyncio.to_thread(_batcher, self.model_dir, self.batch_size)
        batcher = self._batching
        return (await asyncio.wrap_future(batcher.submit(texts))).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        return (await self.aembed_documents([text]))[0]

    def __repr__(self) -> str:
        return f"MiniLMEmbeddings(model_dir={self._model_dir!r}, batch_size={self.batch_size})"
