"""A model server that dies during start-up, said in one line.

The server's own output (a Python traceback, llama.cpp's or vLLM's messages) is in its
log; the console gets one line: the model, the cause in words, what to do, the log's
path. Causes told apart: a signal (SIGILL: a build for another CPU; SIGSEGV; SIGKILL:
most often the kernel's out-of-memory killer), a model file that is not there, a port
another process holds, and otherwise the exit code with the log's last line.
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path


class ServerStartError(ValueError, RuntimeError):
    """A model server that could not start: one line (model, cause, remedy, log path).

    A ValueError, as the config errors are: the CLI prints it alone and exits 2, without
    the Ray traceback that carried it from the server's actor (the server's own output
    is in its log). A RuntimeError too, as the start-up failure was before."""


_PORT_IN_USE = re.compile(r"address already in use|Errno 98\b|EADDRINUSE", re.IGNORECASE)
_NO_FILE = re.compile(
    r"No such file or directory|Model path does not exist|cannot read .*\.gguf|"
    r"does not exist",
    re.IGNORECASE,
)


def describe(
    name: str,
    backend: str,
    returncode: int,
    log_path: Path,
    log_text: str,
    address: str = "",
) -> str:
    """The one line for a server of model `name` that exited with `returncode` before it
    answered; `log_text`: the end of its log."""
    what, why, remedy = _cause(backend, returncode, log_text, address)
    why = f": {why}" if why else ""
    return (
        f"model {name}: its server {what} during start-up{why}; {remedy} (server log: {log_path})"
    )


def _cause(backend: str, code: int, log_text: str, address: str) -> tuple[str, str, str]:
    """(what happened, why in words or "", what to do)."""
    if code < 0:
        return _signal_cause(backend, -code)
    in_use = _PORT_IN_USE.search(log_text)
    if in_use:
        where = f" on {address}" if address else ""
        return (
            f"could not listen{where}",
            f"the port is in use by another process ({_line_of(log_text, in_use.start())})",
            "stop that process, or let distillery choose the port ({port} in a command "
            "backend's launch line)",
        )
    found = _NO_FILE.search(log_text)
    if found:
        line = _line_of(log_text, found.start())
        return (
            "could not find its model file",
            line,
            "put the file there on every node that serves the model, or set the model's "
            "gguf_path (llama_cpp) / model (vllm) to one that exists",
        )
    return f"exited with code {code}", _last_line(log_text), "the server's log says why"


def _signal_cause(backend: str, number: int) -> tuple[str, str, str]:
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    if number == signal.SIGILL:
        if backend == "llama_cpp":
            from distillery.workers.llm.llama_build import (
                REBUILD,
                illegal_instruction_cause,
                read_record,
            )

            cause = illegal_instruction_cause(read_record(sys.prefix))
            return (
                "died of an illegal instruction (SIGILL)",
                cause,
                f"rebuild llama.cpp for this CPU: {REBUILD}",
            )
        return (
            "died of an illegal instruction (SIGILL)",
            "its binary uses an instruction this CPU lacks",
            "install a build of the server for this CPU",
        )
    if number == signal.SIGSEGV:
        hint = (
            "rebuild llama.cpp (bash scripts/setup.sh: a build without AMX, whose kernel "
            "segfaults on some CPUs) and see the log"
            if backend == "llama_cpp"
            else "the log's last lines show where"
        )
        return "crashed", "SIGSEGV, a segmentation fault", hint
    if number == signal.SIGKILL:
        return (
            "was killed",
            "SIGKILL, most often sent by the kernel's out-of-memory killer",
            "give it more memory, or fewer replicas per node, a smaller n_ctx or model "
            "(`dmesg` names an out-of-memory kill)",
        )
    return "was killed", name, "see who sent it (the log's last lines)"


def _line_of(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)].strip()[-300:]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "no output"
