"""The chat templates a GGUF model file carries, read from its header alone.

A GGUF file starts with its metadata (key/value pairs), then tensor descriptions and
the weights. The chat templates are string values under `tokenizer.chat_template`
(the default) and `tokenizer.chat_template.<name>` (named variants, e.g. `tool_use`).
Reading them needs no weights and no llama.cpp: this reads the key/value section and
stops, so a check of a 5 GB model's template costs milliseconds, before any server
starts. Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (versions 2
and 3; version 1, with 32-bit counts, predates every model llama.cpp still loads).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

TEMPLATE_KEY = "tokenizer.chat_template"
_MAGIC = b"GGUF"
# value type -> size in bytes of a fixed-size value (8: string, 9: array are read apart)
_FIXED_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# Far above any real key or template; a larger length means a corrupt or foreign file.
_MAX_STRING = 64 * 1024 * 1024
_MAX_KEYS = 1_000_000


class GgufError(ValueError):
    """The file is not a GGUF model file this reader understands."""


def read_chat_templates(path: str | Path) -> dict[str, str]:
    """Every chat template in the GGUF file at `path`: its metadata key
    (`tokenizer.chat_template`, `tokenizer.chat_template.tool_use`, ...) -> the
    template's Jinja source. Empty when the file carries none."""
    with open(path, "rb") as f:
        return _Reader(f, str(path)).chat_templates()


class _Reader:
    def __init__(self, f: BinaryIO, name: str) -> None:
        self.f = f
        self.name = name
        self.endian = "<"

    def chat_templates(self) -> dict[str, str]:
        if self.f.read(4) != _MAGIC:
            raise GgufError(f"{self.name} is not a GGUF file (no GGUF magic at its start)")
        version = self._unpack("I")
        if version not in (2, 3):
            swapped = struct.unpack(">I", struct.pack("<I", version))[0]
            if swapped not in (2, 3):
                raise GgufError(f"{self.name}: GGUF version {version} is not supported (2 or 3)")
            self.endian = ">"  # a big-endian file
        self._unpack("Q")  # tensor count
        count = self._unpack("Q")
        if count > _MAX_KEYS:
            raise GgufError(f"{self.name}: {count} metadata keys: not a valid GGUF header")
        templates: dict[str, str] = {}
        for _ in range(count):
            key = self._string()
            kind = self._unpack("I")
            if kind == _STRING and key.startswith(TEMPLATE_KEY):
                templates[key] = self._string()
            else:
                self._skip_value(kind)
        return templates

    def _unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise GgufError(f"{self.name}: the GGUF header ends early (truncated file)")
        return struct.unpack(self.endian + fmt, data)[0]

    def _string(self) -> str:
        size = self._unpack("Q")
        if size > _MAX_STRING:
            raise GgufError(f"{self.name}: a {size}-byte metadata string: not a valid GGUF header")
        data = self.f.read(size)
        if len(data) != size:
            raise GgufError(f"{self.name}: the GGUF header ends early (truncated file)")
        return data.decode("utf-8", errors="replace")

    def _skip_string(self) -> None:
        size = self._unpack("Q")
        if size > _MAX_STRING:
            raise GgufError(f"{self.name}: a {size}-byte metadata string: not a valid GGUF header")
        self.f.seek(size, 1)

    def _skip_value(self, kind: int) -> None:
        if kind in _FIXED_SIZES:
            self.f.seek(_FIXED_SIZES[kind], 1)
        elif kind == _STRING:
            self._skip_string()
        elif kind == _ARRAY:
            item = self._unpack("I")
            count = self._unpack("Q")
            if item in _FIXED_SIZES:
                self.f.seek(_FIXED_SIZES[item] * count, 1)
            elif item == _STRING:  # e.g. the vocabulary: one length-prefixed string each
                for _ in range(count):
                    self._skip_string()
            else:
                raise GgufError(f"{self.name}: metadata array of type {item} is not supported")
        else:
            raise GgufError(f"{self.name}: unknown metadata value type {kind}")
