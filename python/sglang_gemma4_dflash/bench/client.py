"""HTTP to an SGLang server, with the standard library only: JSON requests, `/server_info` and its speculative
fields, `/flush_cache`, the native `/generate`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from sglang_gemma4_dflash.bench.errors import BenchError

# The authors' server-mode sampling: greedy, with top_p and top_k spelled out.
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 1}


class HTTPRequestError(BenchError):
    """A request got a non-2xx answer or could not be sent; the message names the URL and the body."""


def _send(url: str, payload: Optional[dict], timeout: float) -> bytes:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, method="GET" if payload is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:2000]
        raise HTTPRequestError(f"{url}: HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise HTTPRequestError(f"{url}: cannot reach the server ({reason})") from None


def http_json(url: str, payload: Optional[dict] = None, timeout: float = 60.0) -> Any:
    """GET (payload None) or POST JSON to `url`; return the decoded JSON answer."""
    body = _send(url, payload, timeout)
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        raise HTTPRequestError(f"{url}: answer is not JSON: {body[:500]!r}") from None


def http_text(url: str, timeout: float = 60.0) -> str:
    """GET `url`; return the answer as text."""
    return _send(url, None, timeout).decode(errors="replace")


def http_ok(url: str, timeout: float) -> bool:
    """True when a GET on `url` answers 2xx within `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read()
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _get_renamed(base_url: str, path: str, old_path: str, timeout: float) -> dict:
    """GET `path`; on a 404 its older spelling `old_path` (servers that lack the newer name)."""
    try:
        return http_json(base_url + path, timeout=timeout)
    except HTTPRequestError as first:
        if "HTTP 404" not in str(first):
            raise
        try:
            return http_json(base_url + old_path, timeout=timeout)
        except HTTPRequestError as second:
            raise HTTPRequestError(f"neither {path} nor {old_path} answered: {first}; {second}") from None


def model_info(base_url: str, timeout: float = 30.0) -> dict:
    """`/model_info` (model_path, tokenizer_path, ...); `/get_model_info` on lines without it."""
    return _get_renamed(base_url, "/model_info", "/get_model_info", timeout)


def flush_cache(base_url: str, timeout: float = 60.0) -> str:
    """Empty the server's prefix cache (GET /flush_cache); return its answer."""
    return http_text(base_url + "/flush_cache", timeout=timeout).strip()


def generate(
    base_url: str,
    prompt: str | Sequence[int],
    max_new_tokens: int,
    timeout: float = 3600.0,
    sampling: Optional[dict] = None,
) -> dict:
    """One `/generate` call on a text or on token ids; `sampling` defaults to GREEDY. Returns SGLang's answer
    (output_ids, text, meta_info)."""
    params = {**(GREEDY if sampling is None else sampling), "max_new_tokens": int(max_new_tokens)}
    payload: dict = {"sampling_params": params}
    if isinstance(prompt, str):
        payload["text"] = prompt
    else:
        payload["input_ids"] = [int(t) for t in prompt]
    out = http_json(base_url + "/generate", payload, timeout)
    if not isinstance(out, dict) or "output_ids" not in out:
        raise HTTPRequestError(f"{base_url}/generate: no output_ids in answer: {str(out)[:500]}")
    return out


def server_info(base_url: str, timeout: float = 30.0) -> dict:
    """The server's `/server_info`; `/get_server_info` (the older spelling) on lines without it."""
    return _get_renamed(base_url, "/server_info", "/get_server_info", timeout)


@dataclass
class SpecSummary:
    speculative_algorithm: Optional[str]
    speculative_num_draft_tokens: Optional[int]
    speculative_draft_attention_backend: Optional[str]
    attention_backend: Optional[str]
    disable_cuda_graph: Optional[bool]
    disable_piecewise_cuda_graph: Optional[bool]
    avg_spec_accept_length: Optional[float]
    version: Optional[str]

    @property
    def cuda_graph_on(self) -> bool:
        return self.disable_cuda_graph is False

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["cuda_graph_on"] = self.cuda_graph_on
        return d


_SPEC_KEYS = (
    "speculative_algorithm",
    "speculative_num_draft_tokens",
    "speculative_draft_attention_backend",
    "attention_backend",
    "disable_cuda_graph",
    "disable_piecewise_cuda_graph",
    "version",
)


def _lookup(info: dict, key: str) -> Any:
    """`info[key]`, or the value under `key` one level down (flat server args in 0.5.13, groups in later lines)."""
    if key in info:
        return info[key]
    for value in info.values():
        if isinstance(value, dict) and key in value:
            return value[key]
    return None


def _opt(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def spec_summary(info: dict) -> SpecSummary:
    """The speculative-decoding fields of a server_info answer. avg_spec_accept_length comes from
    `internal_states[0]` and is None until the server has run at least one speculative step."""
    values = {k: _lookup(info, k) for k in _SPEC_KEYS}
    states = info.get("internal_states") or [{}]
    accept = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    return SpecSummary(
        speculative_algorithm=values["speculative_algorithm"],
        speculative_num_draft_tokens=_opt(values["speculative_num_draft_tokens"], int),
        speculative_draft_attention_backend=values["speculative_draft_attention_backend"],
        attention_backend=values["attention_backend"],
        disable_cuda_graph=_opt(values["disable_cuda_graph"], bool),
        disable_piecewise_cuda_graph=_opt(values["disable_piecewise_cuda_graph"], bool),
        avg_spec_accept_length=_opt(accept, float),
        version=values["version"],
    )
