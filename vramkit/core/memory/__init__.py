"""What a model costs on a GPU, per rank: weights, KV pool, activations (costs.py) and the weight load replayed
through PyTorch's caching allocator (weight_load.py, torch_alloc.py)."""
