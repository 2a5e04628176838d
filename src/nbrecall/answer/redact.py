"""Credentials out of what leaves nbrecall for a model: the LLM context and the MCP tools' results.

Notebooks on a share hold what their authors typed: an AWS key set to reach a bucket, a database URL with its
password, a token pasted to call an API. People who can read the share see them anyway; a model endpoint (hosted,
or a colleague's server) should not. Which strings are credentials is what `detect-secrets` (Yelp) knows, kept up
to date for each provider's key format; its pattern detectors are used (cloud and service keys, tokens, private
keys, JWTs, a password in a URL, a password or key assigned in code), not its entropy detectors, which take the
hashes, ids and base64 data notebooks print for secrets. The detectors are called directly, without
detect-secrets' global settings, so redacting in one thread cannot change it in another.

Each credential is replaced by `[secret removed: KIND]`. `[answer] redact_secrets = false` sends text as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

# detect-secrets' detectors that are not used: they flag any long random-looking string (a git hash, a sha256, an
# id, base64 data) or a public IP address, which notebooks print as data
_NOT_CREDENTIALS = {"Base64HighEntropyString", "HexHighEntropyString", "IPPublicDetector"}
# A detector names the secret by a match group that may be only a prefix (`ghp` of a GitHub token): the whole
# token around it is what goes
_TOKEN = r"[A-Za-z0-9_\-+/=.~]*"
_FILE = "cell.py"  # detectors read quoting by file type: notebook cells are Python more often than not
_CHEAP = re.compile(r"[A-Za-z0-9_\-+/=]{8}")  # a line without 8 token characters in a row holds no credential
# A private key in PEM: detect-secrets flags its first line; the lines of the key itself go with it (to its END
# line, or to the end of the text when that was cut off)
_PEM_LINE = r"-----{} [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM = re.compile(_PEM_LINE.format("BEGIN") + r".*?(?:" + _PEM_LINE.format("END") + r"|\Z)", re.S)
_PEM_KIND = "Private Key"


@dataclass
class Redacted:
    """Text with its credentials replaced, and what kinds were removed (for a notice)."""

    text: str
    kinds: list[str] = field(default_factory=list)


@lru_cache(maxsize=1)
def _detectors() -> tuple[Any, ...]:
    """One instance of each pattern detector, made once per process (they are stateless between lines)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes: set[type[Any]] = set(get_mapping_from_secret_type_to_class().values())
    return tuple(cls() for cls in sorted(classes, key=lambda c: c.__name__) if cls.__name__ not in _NOT_CREDENTIALS)


def _fragment(value: str, line: str) -> bool:
    """Whether every occurrence of `value` in `line` runs on into more letters or digits: a key format matched
    inside a longer run (`ACCA` and 16 capitals inside a printed DNA sequence) is no key."""
    starts = [m.start() for m in re.finditer(re.escape(value), line)]
    return bool(starts) and all(
        (i > 0 and line[i - 1].isalnum()) or (i + len(value) < len(line) and line[i + len(value)].isalnum())
        for i in starts)


def _redact_line(line: str, kinds: list[str]) -> str:
    for detector in _detectors():
        for secret in detector.analyze_line(filename=_FILE, line=line, line_number=0):
            value = secret.secret_value
            if not value or value not in line or _fragment(value, line):
                continue
            pattern = re.compile(_TOKEN + re.escape(value) + _TOKEN) if re.fullmatch(_TOKEN, value) else \
                re.compile(re.escape(value))
            line, count = pattern.subn(f"[secret removed: {secret.type}]", line)
            kinds.extend([secret.type] * count)
    return line


def redact_secrets(text: str) -> Redacted:
    """`text` with every credential the detectors find replaced by `[secret removed: KIND]`, line by line."""
    kinds: list[str] = []
    if "PRIVATE KEY" in text:
        text, count = _PEM.subn(f"[secret removed: {_PEM_KIND}]", text)
        kinds.extend([_PEM_KIND] * count)
    lines = text.split("\n")
    out = [_redact_line(line, kinds) if _CHEAP.search(line) else line for line in lines]
    return Redacted("\n".join(out) if kinds else text, kinds)


def redact_all(value: Any) -> tuple[Any, list[str]]:
    """A JSON-like value (dicts, lists, strings: a tool's result) with `redact_secrets` applied to every string in
    it, keys left as they are; and the kinds removed."""
    kinds: list[str] = []

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            done = redact_secrets(node)
            kinds.extend(done.kinds)
            return done.text
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        if isinstance(node, list | tuple):
            return [walk(item) for item in node]
        return node

    return walk(value), kinds
