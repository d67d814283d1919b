"""ray_kvmoq.relay."""
