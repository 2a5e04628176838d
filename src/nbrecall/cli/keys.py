"""`nbrecall key set` and `nbrecall key clear`: the `key` group, the API keys of the LLM and of the figure describer,
stored encrypted (Fernet)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from nbrecall.cli.common import ConfigOpt, IndexOpt, _Group, _plain, _settings, _Typer, err

key_app = _Typer(cls=_Group, no_args_is_help=True, help="API keys for the LLM endpoint, stored encrypted (Fernet).")


KeyForOpt = Annotated[str, typer.Option("--for", help="Whose key: llm (answers) or vision (figure describer).")]


def _key_name(purpose: str) -> str:
    if purpose not in ("llm", "vision"):
        err.print(f"[red]error:[/red] --for {_plain(purpose)}: say llm or vision")
        raise typer.Exit(2)
    return purpose


@key_app.command("set")
def key_set(index_dir: IndexOpt = None, config: ConfigOpt = None, purpose: KeyForOpt = "llm") -> None:
    """Store the LLM's (or with --for vision, the figure describer's) API key, encrypted: read from stdin when
    piped, else from a hidden prompt (never argv).

    Needs NBRECALL_SECRET_KEY_FILE (a file holding a Fernet key) or NBRECALL_SECRET_KEY.
    """
    from nbrecall.keys import KeyStoreError, load_fernet, store_api_key

    settings = _settings(config, index_dir)
    try:
        load_fernet()  # refuse before asking for the key
    except KeyStoreError as exc:
        err.print(f"[red]refused:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    if sys.stdin.isatty():
        api_key = typer.prompt("API key", hide_input=True, confirmation_prompt=False)
    else:
        api_key = sys.stdin.readline().strip()
    try:
        path = store_api_key(settings, api_key, name=_key_name(purpose))
    except KeyStoreError as exc:
        err.print(f"[red]refused:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    variable = "NBRECALL_VISION_API_KEY" if _key_name(purpose) == "vision" else "NBRECALL_LLM_API_KEY"
    err.print(f"API key stored, encrypted, in {path} ({variable}, when set, still wins)")


@key_app.command("clear")
def key_clear(index_dir: IndexOpt = None, config: ConfigOpt = None, purpose: KeyForOpt = "llm") -> None:
    """Forget the stored LLM (or --for vision) API key."""
    from nbrecall.keys import KeyStoreError, clear_api_key, secrets_path

    settings = _settings(config, index_dir)
    try:
        removed = clear_api_key(settings, name=_key_name(purpose))
    except KeyStoreError as exc:
        err.print(f"[red]error:[/red] {_plain(exc)}")
        raise typer.Exit(2) from exc
    err.print("stored API key removed" if removed else f"no API key stored in {secrets_path(settings)}")
