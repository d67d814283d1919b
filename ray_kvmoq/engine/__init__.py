"""ray_kvmoq.engine."""
