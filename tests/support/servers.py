"""Real servers on loopback for tests: PostgreSQL (from the machine's packages), an
S3-compatible object store (moto's server mode) and an MLflow tracking server on both.

Each is a context manager that starts the server as a child process on a free port,
waits until it answers and stops it (and removes its files) afterwards.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

from distillery.workers.llm.servers import free_port

BIN = Path(sys.executable).parent


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (Debian keeps them off PATH)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _as_postgres_user() -> dict:
    """PostgreSQL refuses to run as root: run it as the `postgres` account there."""
    if os.geteuid() != 0:
        return {}
    account = pwd.getpwnam("postgres")
    return {"user": account.pw_uid, "group": account.pw_gid}


@dataclass(frozen=True)
class Postgres:
    uri: str  # postgresql://user:password@127.0.0.1:port/database
    password: str
    port: int = 5432

    def libpq_env(self, database: str = "mlflow", user: str = "mlflow") -> dict[str, str]:
        """The connection as libpq's variables (what the k8s MLflow server gets from
        the distillery-postgres Secret): no password in any URI."""
        return {
            "PGHOST": "127.0.0.1",
            "PGPORT": str(self.port),
            "PGDATABASE": database,
            "PGUSER": user,
            "PGPASSWORD": self.password,
        }


@contextmanager
def postgres_server(
    database: str = "mlflow", user: str = "mlflow", password: str | None = None
) -> Iterator[Postgres]:
    """`password` may hold any character (a URI needs it percent-encoded: `uri` has it so)."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    run_as = _as_postgres_user()
    root = Path(tempfile.mkdtemp(prefix="dpg-", dir="/tmp"))
    password = password or secrets.token_hex(16)
    (root / "pw").write_text(password)
    if run_as:
        for path in (root, root / "pw"):
            os.chown(path, run_as["user"], run_as["group"])
    port = free_port()
    subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(root / "data"),
            "-U",
            user,
            f"--pwfile={root / 'pw'}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
        ],
        check=True,
        capture_output=True,
        **run_as,
    )
    server = subprocess.Popen(
        [
            str(bin_dir / "postgres"),
            "-D",
            str(root / "data"),
            "-p",
            str(port),
            "-k",
            str(root),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",  # a throwaway test database
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(root / "server.log", "wb"),  # noqa: SIM115 - lives as long as the server
        **run_as,
    )
    env = {**os.environ, "PGPASSWORD": password}
    try:
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL did not start: " + _tail(root / "server.log"))
            time.sleep(0.3)
        subprocess.run(
            [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, database],
            check=True,
            env=env,
            capture_output=True,
        )
        yield Postgres(
            f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{port}/{database}",
            password,
            port,
        )
    finally:
        server.terminate()  # SIGTERM: smart shutdown, then fast
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str  # http://127.0.0.1:port
    env: dict[str, str]  # what a client needs to reach it: endpoint, credentials, region

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            region_name=self.env["AWS_DEFAULT_REGION"],
        )


@contextmanager
def s3_server(buckets: tuple[str, ...] = ("distillery",)) -> Iterator[ObjectStore]:
    """moto's S3 server (state in memory, gone when it stops)."""
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    store = ObjectStore(
        endpoint,
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "distillery-test",
            "AWS_SECRET_ACCESS_KEY": secrets.token_hex(20),
            "AWS_DEFAULT_REGION": "us-east-1",
        },
    )
    try:
        _wait_http(f"{endpoint}/moto-api/", server, "moto")
        for bucket in buckets:
            store.client().create_bucket(Bucket=bucket)
        yield store
    finally:
        _stop(server)


# k8s/base/mlflow.yaml's auth config (the admin comes from the environment).
BASIC_AUTH_INI = """[mlflow]
default_permission = READ
database_uri = {database_uri}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
"""


@contextmanager
def mlflow_server(
    backend_store_uri: str,
    artifacts_destination: str,
    env: dict[str, str],
    basic_auth: tuple[str, str] | None = None,
) -> Iterator[str]:
    """`mlflow server` on `backend_store_uri`, serving artifacts from the destination
    (an s3:// URI: `env` carries the store's endpoint and credentials). `basic_auth`:
    (user, password) of its admin, as k8s/base/mlflow.yaml runs it (`--app-name
    basic-auth`, users in the same database)."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="dmlflow-", suffix=".log", delete=False)  # noqa: SIM115
    server_env = {
        **os.environ,
        **env,
        "MLFLOW_S3_ENDPOINT_URL": env["AWS_ENDPOINT_URL"],
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    auth_args: list[str] = []
    if basic_auth is not None:
        ini = Path(log.name).with_suffix(".ini")
        ini.write_text(BASIC_AUTH_INI.format(database_uri=backend_store_uri))
        server_env.update(
            {
                "MLFLOW_AUTH_CONFIG_PATH": str(ini),
                "MLFLOW_AUTH_ADMIN_USERNAME": basic_auth[0],
                "MLFLOW_AUTH_ADMIN_PASSWORD": basic_auth[1],
                "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(16),
            }
        )
        auth_args = ["--app-name", "basic-auth"]
    server = subprocess.Popen(
        [
            str(BIN / "mlflow"),
            "server",
            *auth_args,
            "--backend-store-uri",
            backend_store_uri,
            "--serve-artifacts",
            "--artifacts-destination",
            artifacts_destination,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=server_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/health", server, "mlflow server", timeout_s=240, log=Path(log.name))
        yield url
    finally:
        _stop(server, group=True)
        log.close()
        os.unlink(log.name)


def _wait_http(
    url: str,
    process: subprocess.Popen,
    what: str,
    timeout_s: float = 60,
    log: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited {process.returncode}: {_tail(log)}")
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not answer at {url} in {timeout_s}s: {_tail(log)}")


def _tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return ""
    return log.read_text(errors="replace")[-3000:]


def _stop(process: subprocess.Popen, group: bool = False) -> None:
    try:
        if group:
            os.killpg(process.pid, 15)
        else:
            process.terminate()
        process.wait(timeout=20)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        if group:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
        else:
            process.kill()
        process.wait()
