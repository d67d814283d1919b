"""ray_kvmoq.kvcache."""
