"""``kvmoq serve`` (deploy a Serve config and print how to use it) and ``kvmoq inspect`` (what KV
is cached where, and which cost figures the router uses).

``kvmoq serve`` joins the Ray cluster at ``--address`` / ``$RAY_ADDRESS``, or else starts a
private local one inside this process (its own temp dir, no dashboard), deploys every application
of the config file, waits for ``/health``, prints curl and ``openai`` usage, and on Ctrl-C takes
down what it started (the apps; and the local cluster if it started it). It never runs
``ray stop``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import yaml


def _say(msg: str) -> None:
    click.echo(msg, err=True)


def _connect(address: str | None, num_cpus: int | None) -> bool:
    """Join ``address`` or start a private local cluster; True if we started it."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        _say(f"joining the Ray cluster at {address}")
        ray.init(address=address, namespace="serve", log_to_driver=False)
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private cluster: no shared token file
    temp = tempfile.mkdtemp(prefix="kvmoq", dir="/tmp")
    _say(f"starting a local Ray head (temp dir {temp})")
    ray.init(
        # Ray Serve LLM wants a CPU per engine plus the ingress: on a 2-core machine Ray needs
        # more logical CPUs than cores (the engines mostly wait on each other anyway)
        num_cpus=num_cpus or max(4, os.cpu_count() or 2),
        include_dashboard=False,
        namespace="serve",
        log_to_driver=False,
        _temp_dir=temp,
    )
    return True


def _load_config(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise click.ClickException(f"cannot read {path}: {exc}") from None
    if not isinstance(config, dict) or not config.get("applications"):
        raise click.ClickException(f"{path} has no `applications:` list (a Serve config file)")
    return config


def _build(app_cfg: dict[str, Any]) -> Any:
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    module, _, attr = str(app_cfg["import_path"]).replace(":", ".").rpartition(".")
    target = getattr(importlib.import_module(module), attr)
    return call_user_app_builder_with_args_if_necessary(target, app_cfg.get("args") or {})


def _wait_healthy(url: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise click.ClickException(f"{url} did not become healthy in {timeout_s:.0f} s")


def usage_text(base: str, model: str, inspect_cmd: str = "kvmoq inspect") -> str:
    """How to talk to a running app (printed by ``kvmoq serve`` and ``make serve``)."""
    return f"""
The OpenAI-compatible API is up at {base}/v1  (model: {model})

  curl {base}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{model}", "messages": [{{"role": "user", "content": "What is 2+2?"}}], "temperature": 0}}'

  curl -N {base}/v1/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{model}", "prompt": "Once upon a time", "max_tokens": 32, "stream": true}}'

  python -c 'from openai import OpenAI; c = OpenAI(base_url="{base}/v1", api_key="none"); \\
print(c.chat.completions.create(model="{model}", messages=[{{"role": "user", "content": "Hi!"}}]).choices[0].message.content)'

Metrics: {base}/metrics   Health: {base}/health
Cached KV: {inspect_cmd}
Press Ctrl-C to stop.
"""


def _deploy(config: dict[str, Any], http: dict[str, Any]) -> str:
    """Start Serve's proxy and deploy every application; returns the first one's base URL."""
    from ray import serve as rserve

    rserve.start(http_options={"host": http["host"], "port": http["port"]})
    for app_cfg in config["applications"]:
        name = app_cfg.get("name", "default")
        prefix = app_cfg.get("route_prefix", "/")
        _say(f"deploying {name!r} ({app_cfg['import_path']}) at {prefix}")
        rserve.run(_build(app_cfg), name=name, route_prefix=prefix, blocking=False)
    shown = "127.0.0.1" if http["host"] in ("0.0.0.0", "::") else http["host"]
    prefix0 = (config["applications"][0].get("route_prefix") or "/").rstrip("/")
    return f"http://{shown}:{http['port']}{prefix0}"


@click.command("serve")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("apps/local.yaml"),
    show_default=True,
    help="Serve config file (applications with import_path and args).",
)
@click.option(
    "--address", default=None, help="Ray cluster to join (default: $RAY_ADDRESS, else start one)."
)
@click.option("--host", default=None, help="HTTP host (overrides the config's http_options).")
@click.option(
    "--port", type=int, default=None, help="HTTP port (overrides the config's http_options)."
)
@click.option("--num-cpus", type=int, default=None, help="CPUs of a locally started cluster.")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=600.0,
    show_default=True,
    help="Seconds to wait for the app.",
)
@click.option(
    "--no-wait", is_flag=True, help="Deploy, print usage and exit (apps stay on a joined cluster)."
)
def serve(
    config_path: Path,
    address: str | None,
    host: str | None,
    port: int | None,
    num_cpus: int | None,
    timeout_s: float,
    no_wait: bool,
) -> None:
    """Deploy a Serve config (default apps/local.yaml) and print how to send prompts."""
    from ray import serve as rserve

    config = _load_config(config_path)
    http = dict(config.get("http_options") or {})
    http["host"] = host or http.get("host", "127.0.0.1")
    http["port"] = port or int(http.get("port", 8000))
    started = _connect(address, num_cpus)
    stopping = False

    def _stop(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        base = _deploy(config, http)
        _say("waiting for the model replicas (the first start converts the model: ~10 s)")
        _wait_healthy(base + "/health", timeout_s)
        import httpx

        model = httpx.get(base + "/v1/models", timeout=10).json()["data"][0]["id"]
        import ray

        addr = ray.get_runtime_context().gcs_address
        env = "RAY_AUTH_MODE=disabled " if started else ""
        click.echo(usage_text(base, model, f"{env}kvmoq inspect --address {addr}"))
        if no_wait:
            return
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        stopping = True
        _say("stopping")
    finally:
        if stopping or started:
            import ray

            try:
                rserve.shutdown()
            finally:
                if started:
                    ray.shutdown()


@click.command("inspect")
@click.option("--address", default=None, help="Ray cluster (default: $RAY_ADDRESS or 'auto').")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def inspect(address: str | None, as_json: bool) -> None:
    """Show which KV each node's relay caches, the measured cost figures the router and the
    connectors use, and every connector's counters."""
    import ray

    from ray_kvmoq.connector.figures import FIGURES_NAME
    from ray_kvmoq.relay.actor import DIRECTORY_NAME, relay_name
    from ray_kvmoq.serving.app import RAY_NAMESPACE

    out: dict[str, Any] = {"nodes": [], "directory": None, "figures": None, "connectors": None}
    try:
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS", "auto"),
            namespace=RAY_NAMESPACE,
            log_to_driver=False,
        )
    except Exception as exc:
        raise click.ClickException(
            f"cannot reach a Ray cluster ({exc}); start one with `kvmoq serve` or pass --address"
        ) from None
    try:
        for n in ray.nodes():
            if not n["Alive"]:
                continue
            row: dict[str, Any] = {"node_id": n["NodeID"], "ip": n["NodeManagerAddress"]}
            try:
                relay = ray.get_actor(relay_name(n["NodeID"]))
                row["relay"] = ray.get(relay.stats.remote(), timeout=10)
            except Exception:
                row["relay"] = None
            out["nodes"].append(row)
        for key, name, method in (
            ("directory", DIRECTORY_NAME, "stats"),
            ("figures", FIGURES_NAME, "snapshot"),
            ("connectors", FIGURES_NAME, "counters"),
        ):
            try:
                out[key] = ray.get(getattr(ray.get_actor(name), method).remote(), timeout=10)
            except Exception:
                out[key] = None
    finally:
        ray.shutdown()
    if as_json:
        click.echo(json.dumps(out, default=str))
        return
    _print_inspect(out)


def _print_inspect(out: dict[str, Any]) -> None:
    click.echo(
        f"{'node':10s} {'ip':15s} {'cached MB':>10s} {'tracks':>7s} {'hits':>6s} "
        f"{'misses':>7s} {'pulled MB':>10s} {'evicted':>8s}"
    )
    for row in out["nodes"]:
        r = row["relay"]
        if r is None:
            click.echo(f"{row['node_id'][:10]:10s} {row['ip']:15s} {'(no relay)':>10s}")
            continue
        click.echo(
            f"{row['node_id'][:10]:10s} {row['ip']:15s} {r.get('bytes_cached', 0) / 1e6:10.2f} "
            f"{r.get('cached_tracks', 0):7d} {r.get('hits', 0):6d} {r.get('misses', 0):7d} "
            f"{r.get('upstream_bytes', 0) / 1e6:10.2f} {r.get('evictions', 0):8d}"
        )
    fig = (out.get("figures") or {}).get("values") or {}
    if fig:
        click.echo("\nmeasured figures (per node):")
        for kind, per_node in fig.items():
            for node, v in per_node.items():
                unit = f"{v * 1e3:.3f} ms/token" if "token" in kind else f"{1e-6 / v:.1f} MB/s"
                click.echo(f"  {kind:22s} {node[:10]:10s} {unit}")
    for source, c in (out.get("connectors") or {}).items():
        shown = {k: v for k, v in c.items() if v and k != "node_id"}
        click.echo(f"\nconnector {source} on {str(c.get('node_id'))[:10]}: {shown}")
    if out["directory"] is not None:
        click.echo(f"\ndirectory: {out['directory']}")
    elif not any(row["relay"] for row in out["nodes"]):
        click.echo("\nno relays yet: deploy an app (kvmoq serve) and send a prompt", err=True)
    sys.stdout.flush()
