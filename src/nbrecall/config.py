"""One configuration object, read from `nbrecall.toml`, the environment and the CLI's flags, passed to every stage.

Precedence: command-line flags > environment variables > `nbrecall.toml` > defaults. The file is looked up as
`--config PATH`, else `$NBRECALL_CONFIG`, else `./nbrecall.toml`; every setting is optional. See README.md for the
documented settings. The sections are plain dataclasses; all three sources are merged into one dict and validated
at once by pydantic against them (strict types, unknown keys refused), so `batch_size = "32"` is an error that
names the file and the key, not a string that breaks a run later.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import ConfigDict, Strict, TypeAdapter, ValidationError

# Every section: strict types (no "32" for 32, no 1 for true) and no unknown keys. Validated as JSON (what TOML,
# the environment and flags amount to), where strict mode takes a table for a section and text for a path.
_STRICT = ConfigDict(extra="forbid", strict=True)
PathText = Annotated[Path, Strict(False)]


@dataclass
class DiscoverSettings:
    """Which files under the roots count as notebooks."""

    skip_hidden: bool = True
    exclude: list[str] = field(default_factory=list)  # folder names never entered
    follow_symlinks: bool = False
    # "versions": `.ipynb_checkpoints` copies are indexed as versions of their notebook (hidden from results, their
    # own content findable, labelled "in an older checkpoint of ..."); "skip": never read (as before)
    checkpoints: str = "versions"
    # A root that holds none of the notebooks indexed from it is most often a share that is not mounted (an empty
    # mount point): its notebooks are kept, and the run says so. True: such a root was emptied on purpose, and its
    # notebooks leave the index.
    prune_empty_roots: bool = False
    # Hash every file, not only those whose size or modification time changed: a content replaced with both kept
    # (`cp -p`, `rsync -t`, a restore from backup) is otherwise taken as unchanged. One full read of the archive.
    rehash: bool = False
    # A notebook file larger than this is quarantined unread, with the reason: parsing holds many times its size in
    # memory (a 100 MB notebook of plot JSON peaked at 2.1 GB, one of 242 MB printed text at 1.0 GB: bench/README.md),
    # and one 2 GB file must not take the run down.
    max_file_mb: float = 256.0
    # Notebooks inside zip archives (a finished project zipped on the share) are indexed as
    # `project.zip/inner/x.ipynb`, read from the archive without extracting it; each member under `max_file_mb`
    # once decompressed. Zips inside zips are not entered. False: zip archives are not opened.
    zip_archives: bool = True


@dataclass
class MetadataSettings:
    """Path rules and deprecation rules (architecture §7)."""

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
class EmbedSettings:
    """Which embedding model (`[embed]`): the bundled default, a local folder, or an OpenAI-compatible endpoint.
    The one embedding-settings class: `index.embed.load_embedder` builds the embedder from it."""

    kind: str = "default"  # "default" | "onnx-folder" | "openai"
    # local model folder: model.onnx or model.safetensors, plus tokenizer.json and config.json
    path: str | None = None
    # OpenAI-compatible base url, e.g. http://127.0.0.1:11434/v1 ; we POST {url}/embeddings
    url: str | None = None
    model: str | None = None
    batch_size: int = 32
    threads: int = 0  # 0 = all usable cores, for onnxruntime intra-op
    enabled: bool = True
    cache_dir: str | None = None  # where the built ONNX model is cached; default <index>/models
    api_key: str | None = None  # the endpoint's key (`kind = "openai"`), or $NBRECALL_EMBED_API_KEY


@dataclass
class RetrieveSettings:
    """Fan-out and priors of retrieval (architecture §8)."""

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
    # a prose-only first hit gives way to a hit that does the work (code, outputs) once each hit gets this share of
    # its neighbouring cells' scores (search.retrieve.work_first; measured in bench/README.md, issue 13); 0: off
    work_region: float = 0.5
    # a query word found only in a figure's machine-made text (OCR, vision model) counts this share of one in
    # the notebook's own text, in the keyword score and the phrase bonus (search.retrieve.machine_share);
    # measured on both development sets in bench/README.md (Figure descriptions); 1.0: counted whole
    machine_text_weight: float = 0.25


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
    """The answer stage (architecture §9): an optional OpenAI-compatible chat endpoint and the context budget.

    Without `base_url` and `model` answers are extractive (no LLM); `kind` names the answerer outright
    ("extractive", "llm", or a plugin's). The API key never lives in the config file:
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
    kind: str = ""  # "": the LLM when base_url and model are set, else extractive; "extractive", "llm", a plugin's
    # The best value candidates in the order a model learned from other archives (`answer.rerank`); false: the
    # hand-set score's order
    rerank: bool = True
    # The learned order's model: "" is the one nbrecall ships (`answer/ranker.onnx`); a path is one trained on your
    # own labelled questions by `bench/ranker_fit.py --out`
    ranker_model: str = ""
    # Credentials in the notebooks (cloud and service keys, tokens, private keys, a password in a URL or assigned in
    # code: detect-secrets' pattern detectors) are replaced by `[secret removed: KIND]` in what leaves for a model:
    # the LLM context and the MCP tools' results (`answer.redact`); false: sent as the notebooks hold them
    redact_secrets: bool = True


@dataclass
class VisionSettings:
    """The figure describer (`nbrecall.vision`): off by default. `ocr` reads the text drawn in a figure with
    Tesseract (offline); `openai` asks an OpenAI-compatible chat endpoint that accepts images (vLLM, Ollama,
    llama.cpp server, a hosted API). Its API key never lives here: $NBRECALL_VISION_API_KEY, else the key stored
    with `nbrecall key set --for vision` (Fernet-encrypted, as the LLM's)."""

    kind: str = ""  # "" (off), "ocr" or "openai"
    url: str | None = None  # OpenAI-compatible base URL, for kind = "openai" (e.g. http://localhost:11434/v1)
    model: str | None = None
    languages: str = "eng"  # Tesseract language packs, "eng+deu"
    prompt: str = ""  # "" : the built-in prompt (what is plotted, axes, units, trends, notable values)
    connect_timeout: float = 5.0  # seconds to open a connection
    timeout: float = 60.0  # seconds for one figure (OCR: one Tesseract run)
    retries: int = 2  # extra attempts on connection errors, time-outs, 429 and 5xx
    backoff: float = 0.5  # seconds before the first retry, doubled each time
    concurrency: int = 2  # figures described at once (Tesseract processes or requests in flight)
    batch_notebooks: int = 8  # notebooks described, then re-indexed with their descriptions, per step
    max_tokens: int = 300  # longest description asked of the model
    max_failures_in_a_row: int = 5  # an endpoint failing this often stops describing for this run
    max_attempts: int = 3  # runs that try a figure before it stays failed


@dataclass
class RenderSettings:
    """Re-rendering in a sandbox (architecture §11, `nbrecall render`); see `nbrecall.render.paths` for `path_map`."""

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
    """Where `nbrecall index` parses/chunks and `nbrecall render` runs notebooks (`nbrecall.executor`).

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
class PluginSettings:
    """Plugins (`nbrecall.plugins`, docs/architecture.md "Plugins"): the built-in ones always register; the ones
    installed under the entry-point group `nbrecall` are loaded unless `load_entrypoints = false`."""

    load_entrypoints: bool = True


@dataclass
class Settings:
    """Everything configurable, in one object."""

    index_dir: PathText = field(default_factory=lambda: Path(".nbrecall"))
    discover: DiscoverSettings = field(default_factory=DiscoverSettings)
    metadata: MetadataSettings = field(default_factory=MetadataSettings)
    chunk: ChunkSettings = field(default_factory=ChunkSettings)
    embed: EmbedSettings = field(default_factory=EmbedSettings)
    retrieve: RetrieveSettings = field(default_factory=RetrieveSettings)
    families: FamilySettings = field(default_factory=FamilySettings)
    answer: AnswerSettings = field(default_factory=AnswerSettings)
    vision: VisionSettings = field(default_factory=VisionSettings)
    render: RenderSettings = field(default_factory=RenderSettings)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    serve: ServeSettings = field(default_factory=ServeSettings)
    plugins: PluginSettings = field(default_factory=PluginSettings)
    config_path: PathText | None = None


# every section of `Settings` (read from its fields, so a new section cannot be left lenient) and Settings itself
_SECTIONS: tuple[type, ...] = tuple(
    cast(type, f.default_factory) for f in fields(Settings)
    if isinstance(f.default_factory, type) and is_dataclass(f.default_factory)
) + (Settings,)
for _section in _SECTIONS:
    _section.__pydantic_config__ = _STRICT  # type: ignore[attr-defined]  # a class attribute pydantic reads
_SETTINGS = TypeAdapter(Settings)


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message names the file and the key."""


def _problem(error: Any, where: str) -> str:
    """One pydantic error as a user reads it: where, which key, what was wrong."""
    loc = [str(part) for part in error["loc"]]
    key = ".".join(["index", "dir"] if loc == ["index_dir"] else loc)
    if error["type"] == "unexpected_keyword_argument":
        section: Any = Settings
        for part in loc[:-1]:
            section = {f.name: f for f in fields(section)}[part].default_factory
        known = sorted(f.name for f in fields(section) if f.name != "config_path")
        return f"{where}: unknown setting '{key}' (known: {', '.join(known)})"
    if error["type"] in ("dataclass_type", "dataclass_exact_type"):
        return f"{where}: '{key}' must be a table"
    return f"{where}: '{key}': {error['msg'].lower()} (got {error['input']!r})"


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# Environment variables and the setting each one sets (section, key); a URL of an embedding or vision endpoint
# also sets that section's `kind` to "openai".
_ENV_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("NBRECALL_STORE", "store", "url"),
    ("NBRECALL_EXECUTOR", "executor", "kind"),
    ("NBRECALL_EMBED_URL", "embed", "url"),
    ("NBRECALL_MODEL_CACHE", "embed", "cache_dir"),
    ("NBRECALL_EMBED_MODEL", "embed", "model"),
    ("NBRECALL_EMBED_API_KEY", "embed", "api_key"),
    ("NBRECALL_LLM_BASE_URL", "answer", "base_url"),
    ("NBRECALL_LLM_MODEL", "answer", "model"),
    ("NBRECALL_VISION_URL", "vision", "url"),
    ("NBRECALL_VISION_MODEL", "vision", "model"),
)
_OPENAI_URLS = ("NBRECALL_EMBED_URL", "NBRECALL_VISION_URL")


def _from_env(env: dict[str, str]) -> dict[str, Any]:
    """The settings the environment sets, as a dict shaped like the file."""
    values: dict[str, Any] = {}
    if env.get("NBRECALL_INDEX"):
        values["index_dir"] = env["NBRECALL_INDEX"]
    for name, section, key in _ENV_SETTINGS:
        if env.get(name):
            table = values.setdefault(section, {})
            if name in _OPENAI_URLS:
                table["kind"] = "openai"
            table[key] = env[name]
    return values


def load_settings(
    config: str | Path | None = None, env: dict[str, str] | None = None, flags: dict[str, Any] | None = None
) -> Settings:
    """Build `Settings` from the config file (if any), the environment and `flags` (the CLI's, shaped like the
    file: `{"index_dir": PATH, "store": {"url": URL}}`), validated together; ConfigError names file and key."""
    env = dict(os.environ if env is None else env)
    path = Path(config) if config else Path(env["NBRECALL_CONFIG"]) if env.get("NBRECALL_CONFIG") else None
    if path is None and Path("nbrecall.toml").is_file():
        path = Path("nbrecall.toml")
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"{path}: config file not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        index = data.pop("index", {})
        if not isinstance(index, dict) or set(index) - {"dir"}:
            raise ConfigError(f"{path}: [index] takes only 'dir'")
        if "dir" in index:
            data["index_dir"] = index["dir"]
        data["config_path"] = str(path)
    # each source alone first, so an error names where it came from; then the merge, in order of precedence
    for source, values in ((str(path), data), ("environment", _from_env(env)), ("flags", flags or {})):
        try:
            _SETTINGS.validate_json(json.dumps(values, default=str))
        except ValidationError as exc:
            raise ConfigError("; ".join(_problem(e, source) for e in exc.errors())) from exc
    merged = _merge(_merge(data, _from_env(env)), flags or {})
    settings = _SETTINGS.validate_json(json.dumps(merged, default=str))
    for rule in settings.metadata.path_rules:
        try:
            re.compile(rule)
        except re.error as exc:
            raise ConfigError(f"{path}: metadata.path_rules: bad regex {rule!r}: {exc}") from exc
    model = settings.answer.ranker_model
    if model and not Path(model).expanduser().is_file():
        raise ConfigError(f"answer.ranker_model: {model!r} is not a file (a model written by `bench/ranker_fit.py "
                          "--out`; \"\" uses the one nbrecall ships)")
    return settings
