"""ray_kvmoq.commands."""
