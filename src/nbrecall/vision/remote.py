"""`[vision] kind = "openai"`: a figure described by a vision model behind an OpenAI-compatible chat endpoint.

Any server that takes `image_url` parts with a data URI works (vLLM, Ollama, llama.cpp server, a hosted API). One
request per figure, `concurrency` in flight (the describe phase's thread pool), each within `timeout`, retried
with exponential backoff on connection errors, time-outs, 429 and 5xx (`Retry-After` in seconds is honoured,
capped). The key is handled like the LLM's: `$NBRECALL_VISION_API_KEY`, else the key stored with
`nbrecall key set --for vision` (Fernet-encrypted); never in the config file.
"""

from __future__ import annotations

import base64
import io
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

from nbrecall.config import Settings, VisionSettings
from nbrecall.vision.describe import DescriberUnavailable, FigureImage, open_image
from nbrecall.vision.store import Description

ENV_VISION_KEY = "NBRECALL_VISION_API_KEY"
KEY_NAME = "vision"
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_SENT_AS_IS = {"image/png", "image/jpeg"}  # other formats (GIF, BMP, WebP) are sent as PNG: every server reads it
MAX_SIDE = 2048  # px: larger images are scaled down before sending (models resize them anyway)
MAX_CHARS = 1500

PROMPT = (
    "Describe this figure from an engineering or data-analysis notebook so that someone can find it by a search. "
    "Say what is plotted (the kind of chart and the quantities), the axes with their units and ranges, the legend "
    "entries, the trends, and notable values (peaks, crossings, limits). If it is a drawing, diagram, photo or "
    "screenshot, say what it shows and copy its visible text. Plain prose, at most 120 words, no preamble."
)


def resolve_vision_key(settings: Settings, env: Mapping[str, str] | None = None) -> str | None:
    """`$NBRECALL_VISION_API_KEY`, else the stored `vision` key, else None (a local server needs none)."""
    from nbrecall.keys import stored_api_key

    env = os.environ if env is None else env
    if env.get(ENV_VISION_KEY):
        return env[ENV_VISION_KEY]
    return stored_api_key(settings, env, name=KEY_NAME)


def image_data_uri(image: FigureImage) -> str:
    """The image as a `data:` URI: PNG and JPEG as they are unless very large, anything else as PNG."""
    data, mime = image.data, image.mime
    if mime not in _SENT_AS_IS or len(data) > 4 * 1024 * 1024:
        img = open_image(data)
        if img is None:
            raise ValueError("image too small to describe")
        if max(img.size) > MAX_SIDE:
            img.thumbnail((MAX_SIDE, MAX_SIDE))
        buffer = io.BytesIO()
        img.save(buffer, format="PNG", optimize=True)
        data, mime = buffer.getvalue(), "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _strip_think(text: str) -> str:
    return re.sub(r"<think>.*?(?:</think>|$)", "", text, flags=re.S).strip()


class OpenAIDescriber:
    """A vision model behind `/chat/completions`; `requests` counts the HTTP requests made (tests, logs)."""

    def __init__(self, settings: VisionSettings, api_key: str | None = None) -> None:
        self.settings = settings
        self.api_key = api_key
        self.model = settings.model or ""
        self.id = f"openai:{self.model}"
        self.label = f"vision model {self.model}"
        self.requests = 0
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None

    @property
    def url(self) -> str:
        base = (self.settings.url or "").rstrip("/")
        return base if base.endswith("/chat/completions") else f"{base}/chat/completions"

    def check(self) -> None:
        if not self.settings.url or not self.settings.model:
            raise DescriberUnavailable("vision.kind = \"openai\" needs vision.url and vision.model (or "
                                       "NBRECALL_VISION_URL and NBRECALL_VISION_MODEL)")

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                timeout = httpx.Timeout(self.settings.timeout, connect=self.settings.connect_timeout)
                limits = httpx.Limits(max_connections=max(1, self.settings.concurrency))
                self._client = httpx.Client(timeout=timeout, limits=limits)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def payload(self, image: FigureImage) -> dict[str, Any]:
        """The chat request for one figure: the prompt, the caption nbrecall has as context, the image."""
        prompt = self.settings.prompt or PROMPT
        if image.caption:
            prompt = f"{prompt}\nThe notebook captions it: {image.caption[:300]}"
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": prompt},
                {"type": "image_url", "image_url": {"url": image_data_uri(image)}},
            ]}],
            "max_tokens": self.settings.max_tokens,
            "temperature": 0.0,
            "stream": False,
        }

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        delay = self.settings.backoff * (2**attempt)
        retry_after = response.headers.get("retry-after", "").strip() if response is not None else ""
        if re.fullmatch(r"\d+(?:\.\d+)?", retry_after):
            delay = max(delay, min(float(retry_after), 30.0))
        return delay

    def describe(self, image: FigureImage) -> Description:
        started = time.perf_counter()
        try:
            body = self.payload(image)
        except Exception as exc:  # an image Pillow cannot read
            return Description(None, f"unreadable image: {type(exc).__name__}: {exc}"[:300])
        client = self._http()
        error = ""
        retries = max(0, self.settings.retries)
        for attempt in range(retries + 1):
            response: httpx.Response | None = None
            with self._lock:
                self.requests += 1
            try:
                response = client.post(self.url, json=body, headers=self._headers())
                if response.status_code < 400:
                    data = response.json()
                    content = (data.get("choices") or [{}])[0].get("message", {}).get("content")
                    if isinstance(content, list):  # some servers answer with content parts
                        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
                    if not isinstance(content, str):
                        return Description(None, f"no message content in the answer from {self.url}",
                                           seconds=time.perf_counter() - started)
                    text = " ".join(_strip_think(content).split())[:MAX_CHARS]
                    return Description(text, seconds=time.perf_counter() - started)
                error = f"HTTP {response.status_code} from {self.url}: {response.text[:200]}"
                if response.status_code not in _RETRY_STATUS:
                    break
            except httpx.TimeoutException as exc:
                error = f"timed out after {self.settings.timeout:g} s talking to {self.url} ({type(exc).__name__})"
            except (httpx.TransportError, ValueError) as exc:  # ValueError: a body that is not JSON
                error = f"request to {self.url} failed: {type(exc).__name__}: {exc}"[:300]
            if attempt < retries:
                time.sleep(self._delay(attempt, response))
        return Description(None, error, seconds=time.perf_counter() - started)
