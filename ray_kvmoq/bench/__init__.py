"""ray_kvmoq.bench."""
