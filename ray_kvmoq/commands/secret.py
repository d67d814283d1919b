"""``kvmoq cluster-secret``: the secret every relay of a cluster derives its trust from.

``ensure`` (run by ``cluster.yaml`` right after ``ray start --head``) stores a fresh random
32-byte secret in the cluster's GCS key-value store unless one is there already; relays that do
not get ``$KVMOQ_CLUSTER_SECRET`` read it from there when they start and derive the cluster CA
and their MoQT token keys from it (``ray_kvmoq.relay.security``), so relays authenticate each
other without any secret in the repository or on the operator's machine. ``rotate`` replaces it
(relays started afterwards use the new one: restart them together). ``show`` prints its
fingerprint, never the secret.
"""

from __future__ import annotations

import hashlib
import os
import secrets

import click

__all__ = ["cluster_secret"]


def _connect(address: str | None) -> None:
    import ray

    ray.init(
        address=address or os.environ.get("RAY_ADDRESS", "auto"),
        log_to_driver=False,
        ignore_reinit_error=True,
    )


@click.command("cluster-secret")
@click.argument("action", type=click.Choice(["ensure", "rotate", "show"]))
@click.option("--address", default=None, help="Ray cluster (default: $RAY_ADDRESS or 'auto').")
def cluster_secret(action: str, address: str | None) -> None:
    """Create (ensure), replace (rotate) or fingerprint (show) the relays' cluster secret."""
    from ray_kvmoq.relay.actor import read_cluster_secret, write_cluster_secret

    try:
        _connect(address)
    except Exception as exc:
        raise click.ClickException(f"cannot reach the Ray cluster: {exc}") from None
    current = read_cluster_secret()
    if (action == "ensure" and current is None) or action == "rotate":
        current = secrets.token_bytes(32)
        write_cluster_secret(current)
        click.echo("stored a new cluster secret in the cluster's GCS", err=True)
    if current is None:
        raise click.ClickException("no cluster secret yet: run `kvmoq cluster-secret ensure`")
    click.echo(f"cluster secret fingerprint: {hashlib.sha256(current).hexdigest()[:16]}")
