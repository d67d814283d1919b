"""ray_kvmoq.serving."""
