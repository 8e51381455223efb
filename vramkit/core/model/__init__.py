"""What a model is: its shape (spec.py), the tensors SGLang allocates for it (arch.py), its checkpoint's tensors
(checkpoint.py)."""
