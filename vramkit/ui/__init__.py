"""Terminal rendering (rich). Core stays pure; this package may import rich, never adapters."""
