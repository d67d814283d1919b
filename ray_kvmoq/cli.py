"""The ``kvmoq`` command line.

Subcommands live in their own modules (``ray_kvmoq.commands.*`` and ``ray_kvmoq.bench.*``) and
are imported only when invoked, so ``kvmoq --help`` stays fast and a subcommand's heavy
dependencies (torch, ray) are paid for only when used. To add a command, add one line to
``_COMMANDS`` or ``_BENCHES`` naming ``module:attribute`` of a ``click.Command``.
"""

from __future__ import annotations

import importlib

import click

# name -> ("module:attr", one-line help shown by --help without importing the module)
_COMMANDS: dict[str, tuple[str, str]] = {
    "pub": (
        "ray_kvmoq.commands.moqt:pub",
        "Publish a synthetic track to a MoQT relay or subscriber.",
    ),
    "sub": (
        "ray_kvmoq.commands.moqt:sub",
        "Subscribe to (or fetch) a MoQT track and print objects.",
    ),
    "relay": ("ray_kvmoq.commands.relay:relay", "Run a caching MoQT relay outside Ray."),
    "chat": ("ray_kvmoq.commands.engine:chat", "Answer one prompt with the local model."),
    "serve": ("ray_kvmoq.commands.serve:serve", "Start the serving app (Ray Serve, OpenAI API)."),
    "inspect": ("ray_kvmoq.commands.serve:inspect", "Show which KV tracks are cached where."),
    "cluster-secret": (
        "ray_kvmoq.commands.secret:cluster_secret",
        "Create, rotate or fingerprint the relays' cluster secret.",
    ),
}
_BENCHES: dict[str, tuple[str, str]] = {
    "transport": ("ray_kvmoq.bench.transport:transport", "MoQT/QUIC vs plain TCP throughput."),
    "codecs": ("ray_kvmoq.bench.codecs:codecs", "KV codec speed, size and quality."),
    "relay": ("ray_kvmoq.bench.relay:relay", "Relay fan-out, cross-node pull vs ray.get."),
    "connector": (
        "ray_kvmoq.bench.connector:connector",
        "vLLM loading prefix KV through the connector vs recomputing it.",
    ),
    "serve": (
        "ray_kvmoq.bench.serve:serve",
        "Ours vs stock Ray Serve LLM, driven by vLLM's benchmark client.",
    ),
    "load": (
        "ray_kvmoq.bench.load:load",
        "Many streaming clients, some hanging up: nothing lost, overload refused.",
    ),
    "soak": ("ray_kvmoq.bench.load:soak", "Long mixed traffic: memory flat, relays in budget."),
    "impair": ("ray_kvmoq.bench.impair:impair", "Relay pulls through loss, delay, blackouts."),
}


class _LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: object, lazy: dict[str, tuple[str, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            target, _ = self._lazy[cmd_name]
            module_name, attr = target.split(":")
            command: click.Command = getattr(importlib.import_module(module_name), attr)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = {name: help_ for name, (_, help_) in self._lazy.items()}
        for name in super().list_commands(ctx):
            cmd = super().get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows[name] = cmd.get_short_help_str(limit=70)
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(sorted(rows.items()))


@click.group(cls=_LazyGroup, lazy=_COMMANDS)
@click.version_option(package_name="ray_kvmoq")
def main() -> None:
    """ray_kvmoq: LLM KV caches shared across a cluster as MoQT tracks."""


@main.group(cls=_LazyGroup, lazy=_BENCHES)
def bench() -> None:
    """Benchmarks; each prints a table (or one JSON object with --json)."""


if __name__ == "__main__":
    main()
