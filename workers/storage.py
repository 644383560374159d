"""Where stage outputs live: a local folder or any pyarrow/fsspec filesystem URI.

The output root of a sweep is a plain path on a laptop and `s3://bucket/prefix` or
`gs://...` on a cluster, so every reader and writer of stage outputs (episode Parquet
files, ledger records, sweep tables) goes through `Location` instead of `pathlib`.
Writes are atomic: a temporary file renamed into place on a local disk; a single
object PUT on object stores, which never shows a partial object.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from distillery.redaction import redact_obj


def s3_options(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """pyarrow S3FileSystem options from the environment every AWS client reads:
    `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (an S3-compatible store such as MinIO;
    its scheme picks http or https), `AWS_REGION` or `AWS_DEFAULT_REGION`. Credentials
    (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, profiles, instance
    roles) are found by the AWS SDK's own chain."""
    options: dict[str, Any] = {}
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        scheme, _, host = endpoint.rpartition("://")
        if scheme not in ("", "http", "https") or not host.strip("/"):
            raise ValueError(f"AWS_ENDPOINT_URL={endpoint!r}: expected http(s)://host[:port]")
        options["endpoint_override"] = host.rstrip("/")
        options["scheme"] = scheme or "https"
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    elif endpoint:
        # Without a region pyarrow asks AWS where the bucket is; a private store has
        # no AWS to ask.
        options["region"] = "us-east-1"
    return options


@cache
def _filesystem(scheme: str, netloc: str) -> pafs.FileSystem:
    uri = f"{scheme}://{netloc}"
    if scheme == "s3":
        return pafs.S3FileSystem(**s3_options())
    try:
        fs, _ = pafs.FileSystem.from_uri(uri + "/")
        return fs
    except (pa.ArrowInvalid, ValueError) as exc:  # not a pyarrow scheme: try fsspec
        try:
            import fsspec
        except ImportError:  # pragma: no cover - fsspec ships with our dependencies
            raise ValueError(f"no filesystem for {uri!r}: {exc}") from exc
        try:
            handler = pafs.FSSpecHandler(fsspec.filesystem(scheme))
        except (ImportError, ValueError) as exc2:
            raise ValueError(
                f"no filesystem for {uri!r} ({exc2}); install the fsspec backend for "
                f"{scheme}:// or use a local path"
            ) from exc2
        return pafs.PyFileSystem(handler)


@dataclass(frozen=True)
class Location:
    """A folder on some filesystem: `Location.of("runs")`, `Location.of("s3://b/p")`."""

    uri: str  # as the user wrote it (absolute for local paths)

    @staticmethod
    def of(uri: str | os.PathLike[str]) -> Location:
        text = str(uri)
        if "://" not in text or text.startswith("file://"):
            text = str(Path(text.removeprefix("file://")).expanduser().resolve())
        return Location(text.rstrip("/") or "/")

    @property
    def is_local(self) -> bool:
        return "://" not in self.uri

    @property
    def local_path(self) -> Path:
        if not self.is_local:
            raise ValueError(f"{self.uri} is not on the local disk")
        return Path(self.uri)

    @property
    def fs(self) -> pafs.FileSystem:
        if self.is_local:
            return pafs.LocalFileSystem()
        scheme, rest = self.uri.split("://", 1)
        netloc = rest.split("/", 1)[0]
        return _filesystem(scheme, netloc)

    @property
    def fs_path(self) -> str:
        """The path as the filesystem object wants it (bucket/key for object stores)."""
        if self.is_local:
            return self.uri
        rest = self.uri.split("://", 1)[1]
        if self.uri.startswith("memory://"):  # fsspec's memory fs keeps a leading slash
            return "/" + rest
        return rest

    def __truediv__(self, name: str) -> Location:
        return Location(f"{self.uri}/{name}")

    def __str__(self) -> str:
        return self.uri

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]

    # -- files ------------------------------------------------------------------

    def exists(self) -> bool:
        return self.fs.get_file_info(self.fs_path).type != pafs.FileType.NotFound

    def mkdir(self) -> None:
        self.fs.create_dir(self.fs_path, recursive=True)

    def write_bytes(self, data: bytes) -> str:
        """Write atomically; returns the sha256 of what was written."""
        fs = self.fs
        parent = self.fs_path.rsplit("/", 1)[0]
        if parent:
            fs.create_dir(parent, recursive=True)
        if isinstance(fs, pafs.LocalFileSystem):
            tmp = f"{parent}/.{self.name}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.fs_path)
        else:
            with fs.open_output_stream(self.fs_path) as out:
                out.write(data)
        return sha256(data)

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.fs_path) as handle:
            return handle.read()

    def write_json(self, data: Any) -> str:
        """Write `data` as JSON, with every secret redacted (ledger records, sweep.json,
        stage identities: nothing written as JSON may carry a key). Its strings are
        redacted, never the JSON text: a secret's characters inside a number or across
        the syntax would leave a file no reader can parse."""
        plain = json.loads(json.dumps(data, default=str))  # what `default` turns into text
        text = json.dumps(redact_obj(plain), indent=1)
        return self.write_bytes(text.encode())

    def read_json(self) -> Any:
        return json.loads(self.read_bytes())

    def listdir(self, suffix: str = "") -> list[Location]:
        """Files directly inside this folder (hidden temporary files skipped), sorted."""
        selector = pafs.FileSelector(self.fs_path, allow_not_found=True)
        names = sorted(
            info.base_name
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
            and not info.base_name.startswith(".")
            and info.base_name.endswith(suffix)
        )
        return [self / name for name in names]

    def subdirs(self) -> list[Location]:
        selector = pafs.FileSelector(self.fs_path, allow_not_found=True)
        names = sorted(
            info.base_name
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.Directory
        )
        return [self / name for name in names]

    def delete(self) -> None:
        info = self.fs.get_file_info(self.fs_path)
        if info.type == pafs.FileType.File:
            self.fs.delete_file(self.fs_path)
        elif info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self.fs_path)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
