"""A real S3-compatible server for the tests and the object-storage benchmark: SeaweedFS
(`deploy/s3/seaweedfs.sh` builds it once per machine into a cache outside the clone), started
on free loopback ports with its data in a temporary folder, one access key made up for the run,
stopped after. Not a mock: S3's protocol as Hadoop's S3A, pyarrow and delta-rs speak it
(listings, ranged reads, conditional writes). Used by tests/conftest.py's S3 fixtures and by
`benchmarks.object_storage`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyarrow import fs as pafs

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "deploy" / "s3" / "seaweedfs.sh"
REGION = "us-east-1"


def binary() -> Path:
    """The SeaweedFS binary, built first when this machine has none (minutes, once)."""
    path = subprocess.run(
        ["bash", str(BUILD), "build"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(path)


def _free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@dataclass
class S3Server:
    """A running SeaweedFS with an S3 gateway at `endpoint` and one identity's keys."""

    endpoint: str
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int = 0
    buckets: set[str] = field(default_factory=set)
    command: list[str] = field(default_factory=list)  # what started it: `restart` runs it again

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach the server with the standard credential chain."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @property
    def spark_conf(self) -> dict[str, str]:
        """The config's `spark.conf` for this endpoint (docs/config.md, "Object storage")."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
        }

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow client with this server's keys, allowed to create buckets."""
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
            connect_timeout=5,
            request_timeout=30,
        )

    def bucket(self, name: str) -> str:
        """Create the bucket (once); its name."""
        if name not in self.buckets:
            self.filesystem().create_dir(name)
            self.buckets.add(name)
        return name

    def usage(self) -> dict[str, float]:
        """What the server has done so far: its CPU seconds, and with a metrics port the S3
        requests it answered, by action (`requests <ACTION>`)."""
        import psutil

        times = psutil.Process(self.process.pid).cpu_times()
        out = {"cpu_s": round(times.user + times.system, 2)}
        if self.metrics_port:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as page:
                for line in page.read().decode().splitlines():
                    if line.startswith("SeaweedFS_s3_request_total{"):
                        action = re.search(r'type="([^"]+)"', line)
                        key = f"requests {action.group(1) if action else '?'}"
                        out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGCONT)  # a paused server takes its SIGTERM
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def pause(self) -> None:
        """Stall the server (SIGSTOP): the kernel still takes connections and requests, and
        nothing answers them until `resume`, which answers every request it took meanwhile."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        """The server gone at once (SIGKILL): its ports refuse connections until `restart`."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def restart(self, timeout: float = 60.0) -> None:
        """The killed server started again on the same data, ports and keys; returns once it
        takes an object."""
        with open(self.log, "ab") as sink:
            self.process = subprocess.Popen(
                self.command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        _wait_until_writable(self, time.monotonic() + timeout)


def start(
    data: Path, weed: Path | None = None, timeout: float = 60.0, metrics_port: int = 0
) -> S3Server:
    """Start SeaweedFS (master, volume, filer and S3 gateway in one process) with its data
    under `data`; returns once the S3 gateway answers. `metrics_port`: where it serves its
    Prometheus metrics (requests by action: what a run asked of the store), 0 for nowhere."""
    weed = weed or binary()
    data.mkdir(parents=True, exist_ok=True)
    access, secret = f"lm{secrets.token_hex(6)}", secrets.token_hex(16)
    identities = {
        "identities": [
            {
                "name": "logmetrics-tests",
                "credentials": [{"accessKey": access, "secretKey": secret}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }
    config = data / "s3.json"
    config.write_text(json.dumps(identities))
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    log = data / "weed.log"
    command = [
        str(weed),
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        f"-s3.config={config}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # Volumes of 256 MB, as many as the disk holds (the default, 8, filled up with the
        # benchmark's 20M-chunk table, its kept keys and a copy of a warehouse).
        "-master.volumeSizeLimitMB=256",
        "-volume.max=0",
        "-volume.preStopSeconds=0",
        f"-metricsPort={metrics_port}",
    ]
    with open(log, "ab") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = S3Server(
        f"http://127.0.0.1:{s3}", access, secret, process, log, metrics_port, command=command
    )
    return _wait_until_writable(server, time.monotonic() + timeout)


def _wait_until_writable(server: S3Server, deadline: float) -> S3Server:
    """`server` once its S3 gateway answers and takes an object; stopped, and an error, when
    it stops or does not by `deadline`."""
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"SeaweedFS stopped at start: {server.log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(server.endpoint, timeout=1)
        except urllib.error.HTTPError:  # the gateway answers (403: no credentials)
            return _writable(server, deadline)
        except OSError:
            pass
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"SeaweedFS's S3 gateway did not answer in time: {server.log}")


def _writable(server: S3Server, deadline: float) -> S3Server:
    """The gateway answers before the volume server has joined: wait until a bucket takes an
    object."""
    while True:
        try:
            with server.filesystem().open_output_stream(
                f"{server.bucket('logmetrics')}/probe"
            ) as out:
                out.write(b"ok")
            return server
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.25)


@contextlib.contextmanager
def running(data: Path, metrics_port: int = 0) -> Iterator[S3Server]:
    """A server started for the block (`start`, then `serving`)."""
    with serving(start(data, metrics_port=metrics_port)) as server:
        yield server


@contextlib.contextmanager
def serving(server: S3Server) -> Iterator[S3Server]:
    """A started server with its keys in this process's environment for the block (the
    standard credential chain reads them, here and in the processes started meanwhile);
    stopped after, the environment as it was."""
    saved = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def upload(local: Path, uri: str) -> None:
    """A local file or folder copied to `uri` on S3 (under it, for a file), with the S3 settings
    `logmetrics.storage` was configured with."""
    from logmetrics import storage

    where = storage.place(uri)
    assert where is not None, uri
    target = where.path if local.is_dir() else f"{where.path}/{local.name}"
    pafs.copy_files(
        str(local),
        target,
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=where.fs,
    )
