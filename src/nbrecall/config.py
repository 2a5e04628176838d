"""One configuration object, read from `nbrecall.toml` and the environment, passed to every stage.

Precedence: command-line flags (applied by the CLI) > environment variables > `nbrecall.toml` > defaults.
The file is looked up as `--config PATH`, else `$NBRECALL_CONFIG`, else `./nbrecall.toml`; every setting is
optional. See README.md for the documented settings.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any


@dataclass
class DiscoverSettings:
    """Which files under the roots count as notebooks."""

    skip_hidden: bool = True
    exclude: list[str] = field(default_factory=list)  # folder names never entered
    follow_symlinks: bool = False
    # "versions": `.ipynb_checkpoints` copies are indexed as versions of their notebook (hidden from results, their
    # own content findable, labelled "in an older checkpoint of ..."); "skip": never read (as before)
    checkpoints: str = "versions"


@dataclass
class MetadataSettings:
    """Path rules and deprecation rules (DESIGN §5)."""

    path_rules: list[str] = field(default_factory=list)
    deprecated_tags: list[str] = field(default_factory=lambda: ["deprecated"])
    deprecated_paths: list[str] = field(default_factory=list)
    sidecar_suffix: str = ".tags.txt"

    def compiled_rules(self) -> list[re.Pattern[str]]:
        return [re.compile(rule) for rule in self.path_rules]


@dataclass
class ChunkSettings:
    """Token budget for grouped chunks; 0 means ~20% under the embedder's maximum input."""

    budget_tokens: int = 0
    max_output_chars: int = 2000


@dataclass
class EmbedConfig:
    """Which embedding model: the bundled default, a local folder, or an OpenAI-compatible endpoint."""

    kind: str = "default"
    path: str | None = None
    url: str | None = None
    model: str | None = None
    batch_size: int = 32
    threads: int = 0
    enabled: bool = True
    cache_dir: str | None = None  # where the built ONNX model is cached; default <index>/models


@dataclass
class RetrieveSettings:
    """Fan-out and priors of retrieval (DESIGN §6)."""

    fanout: int = 50
    hits_per_notebook: int = 5  # distinct cells shown per notebook
    top_notebooks: int = 3
    neighbours_after: int = 2
    fusion: str = "convex"  # "convex" (BM25 relative to best + cosine) or "rrf"
    alpha: float = 0.8  # keyword weight in "convex" (measured on shared/eval: 0.5 → nb@1 0.883, 0.8 → 0.900)
    rrf_k: int = 60
    phrase_weight: float = 0.6  # bonus for the share of the query's word pairs found adjacent in a chunk
    intent_boost: float = 0.15  # favour chunk kinds the query asks for ("plot of" → figure, "how many" → scalar)
    kind_slot: int = 1  # a notebook's best chunk of the asked-for kind is shown at this position at the latest; -1: off
    hit_floor: float = 0.6  # a notebook's chunks scoring under this share of its best one are not listed


@dataclass
class FamilySettings:
    """Notebook families (`nbrecall.ingest.families`): copies and versions of one notebook shown as one result.

    Two notebooks are versions when most lines of the smaller one (sources and outputs) are in the larger one
    (`threshold`) and they share at least `min_jaccard` of their lines together (so a short notebook is not a
    version of a long one that quotes it). Measured on the development corpora: see bench/README.md."""

    enabled: bool = True
    threshold: float = 0.7  # estimated share of the smaller notebook's distinct lines found in the larger one
    min_jaccard: float = 0.3  # estimated Jaccard similarity of the two sets of lines; the LSH is tuned to it
    min_shared: int = 10  # and at least this many lines in common (a header and a licence make no version)
    num_perm: int = 128  # MinHash permutations (the estimate's standard error is about 0.5/sqrt(num_perm))
    tie_margin: float = 0.0  # members scoring within this share of the best tie: the recent, healthy one wins
    max_listed: int = 20  # other versions listed with a result
    version_hits: int = 2  # cells of other versions that the shown one lacks, listed under it (0: none)


@dataclass
class AnswerSettings:
    """The answer stage (DESIGN §7): an optional OpenAI-compatible chat endpoint and the context budget.

    Without `base_url` and `model` answers are extractive (no LLM). The API key never lives in the config file:
    it comes from $NBRECALL_LLM_API_KEY or from the encrypted store written by `nbrecall key set`.
    """

    base_url: str | None = None  # e.g. http://localhost:11434/v1 (Ollama), http://host:8000/v1 (vLLM)
    model: str | None = None
    connect_timeout: float = 5.0  # seconds to open a connection
    timeout: float = 60.0  # seconds to wait for the next piece of the stream
    retries: int = 2  # extra attempts on connection errors, 429 and 5xx before the first token
    backoff: float = 0.5  # seconds before the first retry, doubled each time
    context_tokens: int = 3000  # cl100k tokens of notebook context sent with the question
    max_tokens: int = 800  # longest answer asked of the model
    temperature: float = 0.1
    secrets_file: str | None = None  # encrypted API keys; default <index>/secrets.json


@dataclass
class RenderSettings:
    """Re-rendering in a sandbox (DESIGN §9, `nbrecall render`); see `nbrecall.render.paths` for `path_map`."""

    data_dir: str | None = None  # mounted read-only at /data; path_map targets are relative to it
    path_map: list[dict[str, str]] = field(default_factory=list)  # [[render.path_map]] from = .., to = ..
    python: str | None = None  # the kernel's interpreter (needs ipykernel); default: nbrecall's own
    workers: int = 2
    cell_timeout: float = 60.0  # seconds per cell
    notebook_timeout: float = 600.0  # seconds per notebook, kernel start included
    memory_mb: int = 4096  # address-space limit of the kernel
    cpu_seconds: int = 900  # CPU-time limit of the kernel
    processes: int = 256  # processes + threads the kernel may run (a fork bomb stops there)
    copy_limit_mb: int = 256  # the notebook's folder is copied (writable, thrown away) up to this size
    rel_tol: float = 1e-6  # relative tolerance for numbers in outputs
    compare_stderr: bool = False  # warnings on stderr are not results
    out_dir: str | None = None  # default <index>/renders
    backend: str = "kernel"  # "kernel" (IPython in bubblewrap) or "pyodide" (Pyodide in Node.js in bubblewrap)
    pyodide_wheels: str | None = None  # local folder of wheels the pyodide backend may load (nothing downloads)
    # [[render.environment]] name = .., python = .. (or env = ..), path / kernel / language_version = ..: which
    # interpreter runs which notebooks (first match wins; see nbrecall.render.environments)
    environment: list[dict[str, str]] = field(default_factory=list)
    project_kernel_config: bool = True  # load a project's ipython_kernel_config.py (notebook folder or above)
    pin_display: bool = True  # draw figures at the dpi and default size the stored figures show
    image_threshold: float = 0.38  # perceptual: changed area above which a figure differs (render/images.py)


@dataclass
class StoreSettings:
    """Where chunks and manifest live: empty `url` keeps the embedded index folder; a `postgresql://` URL puts
    both in that database (pgvector), shared by indexers and servers on several machines, in `schema`."""

    url: str | None = None
    schema: str = "nbrecall"
    cache_mb: int = 768  # embedded store: LanceDB's index + metadata caches (its defaults allow several GB)


@dataclass
class ExecutorSettings:
    """Where `nbrecall index` parses/chunks and `nbrecall render` runs notebooks (`nbrecall.ingest.executor`).

    `kind`: "local" (a process pool here; `render` keeps its own pool of `render.workers`), "ray" (attach to
    $RAY_ADDRESS or a cluster started here with `ray start`, else start a local one), "ray://HOST:PORT" (a remote
    cluster's client server) or "HOST:PORT" (a cluster's GCS address, from one of its nodes). Ray needs the extra:
    pip install 'nbrecall[ray]'.
    """

    kind: str = "local"
    workers: int = 0  # 0: os.cpu_count() for local, the cluster's CPUs for Ray; 1 with local: in this process
    retries: int = 2  # re-runs of a task whose worker died (Ray: also a lost node) before its notebook is given up


@dataclass
class ServeSettings:
    """`nbrecall serve`: which Host names it answers, and what one request may cost (`nbrecall.web.heavy`).

    Notebook pages, cells, fidelity reports and dependency maps are rendered in `workers` separate processes,
    each task within a time and a memory budget; beyond either, the page is shown simplified (outputs as escaped
    text) with a notice, and the process is replaced. Searches never wait for them.
    """

    allowed_hosts: list[str] = field(default_factory=list)  # Host names clients use, besides loopback and --host
    workers: int = 2  # render processes: at most this many heavy requests run at once, the rest wait their turn
    render_timeout: float = 5.0  # seconds for one viewer page or one cell
    report_timeout: float = 30.0  # seconds for one fidelity report or dependency map
    render_memory_mb: int = 1024  # a render process past this resident size is stopped
    cache_mb: int = 64  # rendered pages, reports and maps kept, by notebook hash
    page_cells: int = 100  # cells per viewer page
    queue_timeout: float = 30.0  # seconds a heavy request waits for a render process before a 503


@dataclass
class Settings:
    """Everything configurable, in one object."""

    index_dir: Path = field(default_factory=lambda: Path(".nbrecall"))
    discover: DiscoverSettings = field(default_factory=DiscoverSettings)
    metadata: MetadataSettings = field(default_factory=MetadataSettings)
    chunk: ChunkSettings = field(default_factory=ChunkSettings)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    retrieve: RetrieveSettings = field(default_factory=RetrieveSettings)
    families: FamilySettings = field(default_factory=FamilySettings)
    answer: AnswerSettings = field(default_factory=AnswerSettings)
    render: RenderSettings = field(default_factory=RenderSettings)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    serve: ServeSettings = field(default_factory=ServeSettings)
    config_path: Path | None = None


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message names the file and the key."""


def _apply(target: Any, values: dict[str, Any], where: str) -> None:
    known = {f.name: f for f in fields(target)}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown setting '{key}' (known: {', '.join(sorted(known))})")
        current = getattr(target, key)
        if is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: '{key}' must be a table")
            _apply(current, value, f"{where}.{key}")
        elif isinstance(current, Path):
            setattr(target, key, Path(value))
        else:
            setattr(target, key, value)


def load_settings(config: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Build `Settings` from the config file (if any) and the environment."""
    env = dict(os.environ if env is None else env)
    settings = Settings()
    path = Path(config) if config else Path(env["NBRECALL_CONFIG"]) if env.get("NBRECALL_CONFIG") else None
    if path is None and Path("nbrecall.toml").is_file():
        path = Path("nbrecall.toml")
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"{path}: config file not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        index = data.pop("index", {})
        if "dir" in index:
            settings.index_dir = Path(index.pop("dir"))
        _apply(settings, data, str(path))
        settings.config_path = path
        for rule in settings.metadata.path_rules:
            try:
                re.compile(rule)
            except re.error as exc:
                raise ConfigError(f"{path}: metadata.path_rules: bad regex {rule!r}: {exc}") from exc
    if env.get("NBRECALL_INDEX"):
        settings.index_dir = Path(env["NBRECALL_INDEX"])
    if env.get("NBRECALL_STORE"):
        settings.store.url = env["NBRECALL_STORE"]
    if env.get("NBRECALL_EXECUTOR"):
        settings.executor.kind = env["NBRECALL_EXECUTOR"]
    if env.get("NBRECALL_EMBED_URL"):
        settings.embed.kind = "openai"
        settings.embed.url = env["NBRECALL_EMBED_URL"]
    if env.get("NBRECALL_MODEL_CACHE"):
        settings.embed.cache_dir = env["NBRECALL_MODEL_CACHE"]
    if env.get("NBRECALL_EMBED_MODEL"):
        settings.embed.model = env["NBRECALL_EMBED_MODEL"]
    if env.get("NBRECALL_LLM_BASE_URL"):
        settings.answer.base_url = env["NBRECALL_LLM_BASE_URL"]
    if env.get("NBRECALL_LLM_MODEL"):
        settings.answer.model = env["NBRECALL_LLM_MODEL"]
    return settings
