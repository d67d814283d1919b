"""ray_kvmoq.moqt."""
