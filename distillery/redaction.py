"""Secrets redacted by value, in one place, for every writer (driver and Ray workers).

A key can reach a run in several ways: the environment variable named by an
`api_key_env`, the userinfo of a URL (`http://user:KEY@host/v1` as a `base_url`,
`tracking.uri` or `memory.store.url`), a server's extra arguments
(`extra_args=[--api-key, KEY]`) or any config value whose name says it is one
(`hf_token`, `password`). Redacting by key NAME misses most of these, and the value
then turns up in an error message, an endpoint column or a log line. So:

- `secrets_in(config)` collects the secret VALUES a config carries or points to;
- `register_secrets(values)` adds them to this process's registry (the driver does it
  for every config it runs, each Ray worker for the model it talks to);
- `redact(text)` replaces every registered value, and the userinfo of every URL
  (registered or not), with `<redacted>`; `redact_obj` does the same through dicts,
  lists and dataclasses;
- `install()` makes log records and this process's stdout/stderr go through `redact`;
- `protect(*configs)` is what every entry point calls first (each `distillery`
  subcommand, the sweep, each Ray worker and server actor): the secrets of its
  environment (`environment_secrets`: variables named like keys, URL userinfo in any
  variable) and of its configs registered, then `install()`.

A URL's userinfo is also sent as HTTP Basic credentials, so its base64 form
(`user:password`, as a server may echo the Authorization header) is registered with it.

Values shorter than `MIN_SECRET_CHARS` are not replaced by value (replacing every
"abc" would damage episode data); inside a URL they are still caught structurally.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 6

# A config key that holds a secret itself (not the NAME of a variable holding one).
_SECRET_KEY = re.compile(
    r"(^|[_.-])(api_?key|apikey|token|secret|password|passwd|credentials?|auth"
    r"|secret_access_key|secret_?key|private_?key)s?$",
    re.IGNORECASE,
)
# A command-line flag that takes a secret: --api-key KEY, --hf-token=KEY, --password KEY.
# Not "tokens" (--max-num-batched-tokens, --cache-tokens: counts), and a number is never
# taken for a key (--ms-per-token 0.1): registered, "400000" was cut out of every number
# written after it, a ledger run record's wall time included. A password may be digits.
_SECRET_FLAG = re.compile(
    r"^--?[\w-]*(api[_-]?keys?|token|secrets?|passwords?|passwd|credentials?)$", re.IGNORECASE
)
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
# scheme://userinfo@ : the userinfo of any URL in any text.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@\"'<>]+)@")

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None


def is_secret_key(name: str) -> bool:
    """True for a config key whose value is a secret (`api_key`, `hf_token`, ...); the
    `*_env` keys name a variable and are not secrets."""
    leaf = name.rsplit(".", 1)[-1]
    return not leaf.lower().endswith("_env") and bool(_SECRET_KEY.search(leaf))


def url_secrets(url: str) -> list[str]:
    """The password of a URL's userinfo, or its username when it has no password (a
    bare token: `https://TOKEN@host`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    if parts.password:
        return [parts.password]
    if parts.username and "@" in parts.netloc:
        return [parts.username]
    return []


def basic_auth_secrets(url: str) -> list[str]:
    """The HTTP Basic credentials a client builds from a URL's userinfo (base64 of
    `user:password`), as a server echoing the Authorization header would show them."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    if parts.username is None or "@" not in parts.netloc:
        return []
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return [base64.b64encode(pair).decode()]


def environment_secrets(environ: Mapping[str, str] | None = None) -> set[str]:
    """The secret values of an environment: variables named like a key (`*_API_KEY`,
    `*_TOKEN`, `*_PASSWORD`, `AWS_SECRET_ACCESS_KEY`, ...) and the userinfo of a URL in
    any variable (`MLFLOW_TRACKING_URI=https://user:KEY@host`)."""
    env = os.environ if environ is None else environ
    found: set[str] = set()
    for name, value in env.items():
        if not value:
            continue
        if is_secret_key(name):
            found.add(value)
        if "://" in value and "@" in value:
            found.update(url_secrets(value))
            found.update(basic_auth_secrets(value))
    return found


def secrets_in(config: Any, environ: Mapping[str, str] | None = None) -> set[str]:
    """Every secret value a config (a pydantic model, dataclass, dict or list) holds or
    names: set `api_key_env` variables, URL userinfo, secret-named values and the
    values of secret flags in argument lists."""
    env = os.environ if environ is None else environ
    found: set[str] = set()

    def walk(value: Any, key: str) -> None:
        if hasattr(value, "model_dump"):
            value = value.model_dump(mode="json")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, str(k))
            return
        if isinstance(value, list | tuple):
            items = [str(v) for v in value if isinstance(v, str | int | float)]
            for i, item in enumerate(items):
                flag, eq, inline = item.partition("=")
                if not _SECRET_FLAG.match(flag):
                    continue
                if eq:
                    taken = inline
                elif i + 1 < len(items) and not items[i + 1].startswith("-"):
                    taken = items[i + 1]
                else:
                    continue
                # A number after --ms-per-token is a count; a password may be digits.
                if not _NUMBER.match(taken) or re.search("pass", flag, re.IGNORECASE):
                    found.add(taken)
            for v in value:
                walk(v, key)
            return
        if not isinstance(value, str) or not value:
            return
        if key.lower().endswith("api_key_env") or key.lower() == "key_env":
            secret = env.get(value)
            if secret:
                found.add(secret)
            return
        if is_secret_key(key):
            found.add(value)
        if "://" in value:
            found.update(url_secrets(value))
            found.update(basic_auth_secrets(value))

    walk(config, "")
    return {s for s in found if s}


def register_secrets(values: Iterable[str]) -> None:
    """Add secret values to this process's registry (redacted from now on)."""
    global _pattern
    new = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}
    with _lock:
        if new <= _secrets:
            return
        _secrets.update(new)
        ordered = sorted(_secrets, key=len, reverse=True)  # longest first: no partial hits
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))


def registered() -> frozenset[str]:
    return frozenset(_secrets)


def clear_secrets() -> None:
    """Forget every registered value (tests)."""
    global _pattern
    with _lock:
        _secrets.clear()
        _pattern = None


def redact(text: str) -> str:
    """`text` with every registered secret and every URL userinfo replaced."""
    if not text:
        return text
    if "://" in text and "@" in text:  # first: the whole userinfo, user name included
        text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    return text


def redact_values(text: str) -> str:
    """`text` with every registered secret replaced, and nothing else: for data a
    benchmark shows the model (a URL's userinfo there is the task's, not a key)."""
    pattern = _pattern
    if not text or pattern is None:
        return text
    return pattern.sub(REDACTED, text)


def redact_url(url: str) -> str:
    return redact(url)


def redact_obj(value: Any) -> Any:
    """A copy of `value` with every string in it redacted (dicts, lists, tuples, frozen
    dataclasses); other values are returned as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {redact_obj(k): redact_obj(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_obj(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_obj(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = redact_obj(old)
            if new is not old and new != old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value


# -- logs and standard streams -----------------------------------------------------------

_installed = False


class RedactingStream(io.TextIOBase):
    """A text stream that redacts what is written, then writes it to `target`."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def write(self, text: str) -> int:
        self._target.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return bool(getattr(self._target, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def install(streams: bool = True) -> None:
    """Redact every log record of this process (its message, arguments and traceback,
    whatever handler writes it) and, with `streams`, everything written to sys.stdout /
    sys.stderr. Idempotent; the CLI and each Ray worker call it."""
    global _installed
    if streams:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, RedactingStream):
                setattr(sys, name, RedactingStream(stream))
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error path
            return record
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return record

    logging.setLogRecordFactory(factory)


def protect(*configs: Any) -> None:
    """What every entry point does first: the secrets of this process's environment
    and of `configs` registered, then logs and standard streams redacted (`install`)."""
    register_secrets(environment_secrets())
    for config in configs:
        register_secrets(secrets_in(config))
    install()
